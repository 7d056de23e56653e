package shards_test

// The membership's metadata within Azure's 8 KiB (issue 24 item 4): the
// lease IDs a replica announces are cut to fit, and its weight is always
// written, so that the others count it.

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// longestNames are k shard names of the longest length a group named
// "g" allows (1,015 bytes: "g/shards/NAME" is at most 1,024), made of
// characters that URL escaping triples ("%"), so that each takes the most
// room a membership's metadata can give an announced ID.
func longestNames(k int) []string {
	out := make([]string, k)
	for i := range out {
		p := fmt.Sprintf("%04d", i)
		out[i] = p + strings.Repeat("%", 1015-len(p))
	}
	return out
}

// requestMetadataSize is what Azure counts of the metadata a request
// sets: names and values.
func requestMetadataSize(r azleasetest.Request) int {
	n := 0
	for k, vs := range r.Header {
		if name, ok := strings.CutPrefix(strings.ToLower(k), "x-ms-meta-"); ok {
			n += len(name) + len(strings.Join(vs, ","))
		}
	}
	return n
}

// metadataSize is what Azure counts of a blob's metadata: names and
// values.
func metadataSize(md map[string]*string) int {
	n := 0
	for k, v := range md {
		n += len(k)
		if v != nil {
			n += len(*v)
		}
	}
	return n
}

// holdByHand leases name for 60 s with a made-up azlease record naming
// holder, as a replica that owns the shard leaves it.
func holdByHand(t *testing.T, cc *container.Client, name, holder string) {
	t.Helper()
	ctx := context.Background()
	md := map[string]*string{
		"azleaseepoch": to.Ptr("1"), "azleaseholder": to.Ptr(holder),
		"azleaseacquired": to.Ptr(strconv.FormatInt(time.Now().UnixMilli(), 10)),
	}
	_, err := cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md})
	require.NoError(t, err)
	lc, err := lease.NewBlobClient(cc.NewBlobClient(name), nil)
	require.NoError(t, err)
	_, err = lc.AcquireLease(ctx, 60, nil)
	require.NoError(t, err)
}

// TestMembershipFitsWithTheLongestNames: a replica joins a group of
// MaxShards shards with the longest names, of which another member owns 64
// more than its share: those 64 are planned to the joiner, which announces
// IDs for them. Its identity is the
// longest (64 bytes that escaping triples) and its membership blob already
// carries the fullest history azlease keeps (8 terms by such holders): the
// largest record azlease writes. Its membership must be written, weight
// included, within 8 KiB (the emulator refuses more, as Azure does), with
// as many IDs as fit, each for a shard planned to it; the others count it.
// The IDs were capped by count (100), not bytes: the write was refused
// with 400 MetadataTooLarge at every poll, and the joiner never counted.
func TestMembershipFitsWithTheLongestNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var mu sync.Mutex
		largest, writes := 0, 0 // of the joiner's metadata writes
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Client == "b" && r.Op == azleasetest.OpSetMetadata {
				mu.Lock()
				largest, writes = max(largest, requestMetadataSize(r)), writes+1
				mu.Unlock()
			}
			return azleasetest.Fault{}
		})
		obs := srv.Client("observer")
		names := longestNames(shards.MaxShards)
		// a owns 64 shards more than its share: they are planned to the
		// joiner, with the free ones (which it does not take: it settles
		// for an hour).
		for _, s := range names[:shards.MaxShards/2+64] {
			holdByHand(t, obs, "g/shards/"+s, "a")
		}
		// a's membership, held by hand, and the joiner's, the fullest record.
		mlock, id := fullestMembers(t, obs)

		g, err := shards.New(srv.Client("b"), "g", names, &shards.Options{Identity: id, Settle: time.Hour, Logger: testLogger("b")})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), func(ctx context.Context, s *shards.Shard) error { <-ctx.Done(); return nil }))
		t.Cleanup(func() { _ = g.Stop(context.Background()) })
		time.Sleep(time.Second) // its first poll: it joins and announces

		props, err := obs.NewBlobClient("g/members/"+id).GetProperties(context.Background(), nil)
		require.NoError(t, err)
		size := metadataSize(props.Metadata)
		mu.Lock()
		t.Logf("membership metadata: %d bytes; the largest of %d writes: %d bytes", size, writes, largest)
		assert.LessOrEqual(t, largest, 8<<10, "no write was larger than Azure takes")
		mu.Unlock()
		assert.LessOrEqual(t, size, 8<<10)
		st, err := azlease.Inspect(context.Background(), obs, "g/members/"+id)
		require.NoError(t, err)
		assert.Len(t, st.History, 8, "the fullest history")
		assert.Equal(t, "1", st.Metadata["shardweight"], "the weight is written")
		assert.Equal(t, strconv.Itoa(shards.MaxShards), st.Metadata["shardcount"])
		var announced []string
		for _, item := range strings.Split(st.Metadata["shardin"], ",") {
			k, _, ok := strings.Cut(item, "=")
			require.True(t, ok, "item %q", item)
			s, err := url.QueryUnescape(k)
			require.NoError(t, err)
			announced = append(announced, s)
		}
		assert.NotEmpty(t, announced, "as many IDs as fit: at least one")

		a, err := shards.Inspect(context.Background(), obs, "g", names)
		require.NoError(t, err)
		shares := map[string]int{}
		for _, m := range a.Members {
			shares[m.Name] = m.Share
		}
		assert.Equal(t, map[string]int{"a": shards.MaxShards / 2, id: shards.MaxShards / 2}, shares, "the joiner is counted")
		planned := map[string]string{}
		for _, s := range a.Shards {
			planned[s.Name] = s.Planned
		}
		for _, s := range announced {
			assert.Equal(t, id, planned[s], "an ID for a shard planned to the joiner")
		}
		require.NoError(t, g.Stop(context.Background()))
		require.NoError(t, mlock.Unlock(context.Background()))
	})
}

// TestMembershipWeightSurvivesATooLargeAnswer: when Azure finds the
// membership's metadata too large although it fits the room reserved for
// it (here a fault refuses more than 2,000 bytes, as if someone else's
// metadata or a larger record took the rest), the replica announces fewer
// IDs, down to none if it must, and its weight is written: the others
// count it, and shards keep reaching it.
func TestMembershipWeightSurvivesATooLargeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		const limit = 2000
		var mu sync.Mutex
		refused := 0
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op != azleasetest.OpSetMetadata || !strings.Contains(r.Blob, "/members/") {
				return azleasetest.Fault{}
			}
			if requestMetadataSize(r) <= limit {
				return azleasetest.Fault{}
			}
			mu.Lock()
			refused++
			mu.Unlock()
			return azleasetest.Fault{Action: azleasetest.Fail, Status: 400, Code: "MetadataTooLarge"}
		})
		names := make([]string, 64)
		for i := range names {
			names[i] = fmt.Sprintf("tenant-%08d-0000-4000-8000-%012d", i, i) // 43 bytes, as "tenant-<uuid>"
		}
		o := newOwners()
		start := func(id string) *shards.Group {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Logger: testLogger(id)})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			t.Cleanup(func() { _ = g.Stop(context.Background()) })
			return g
		}
		a := start("a")
		time.Sleep(10 * time.Second)
		require.Equal(t, map[string]int{"a": 64}, o.counts())
		b := start("b")
		time.Sleep(60 * time.Second)
		assert.Equal(t, map[string]int{"a": 32, "b": 32}, o.counts(), "balanced although the IDs are cut")
		mu.Lock()
		assert.NotZero(t, refused, "the fault refused a write")
		mu.Unlock()
		st, err := azlease.Inspect(context.Background(), srv.Client("observer"), "g/members/b")
		require.NoError(t, err)
		assert.Equal(t, "1", st.Metadata["shardweight"])
		require.NoError(t, b.Stop(context.Background()))
		require.NoError(t, a.Stop(context.Background()))
		o.check(t, srv, "g", names)
	})
}

// TestMembershipLoadsFitWithTheLongestNames: a replica whose work reports
// loads owns 320 shards with the longest names (more than the 300 loads
// that fit), is planned shards another member holds (their lease IDs to
// announce), and its membership carries azlease's fullest record under the
// longest identity: every write of its membership fits 8 KiB, its loads are
// published (the heaviest 300, the rest as their count and mean), and
// Inspect reads every one of its shards' loads back.
func TestMembershipLoadsFitWithTheLongestNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var mu sync.Mutex
		largest := 0
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata && strings.Contains(r.Blob, "/members/") {
				mu.Lock()
				largest = max(largest, requestMetadataSize(r))
				mu.Unlock()
			}
			return azleasetest.Fault{}
		})
		obs := srv.Client("observer")
		names := longestNames(720)
		for _, s := range names[:400] { // leased for 60 s
			holdByHand(t, obs, "g/shards/"+s, "a")
		}
		mlock, id := fullestMembers(t, obs)

		load := map[string]float64{}
		for i, s := range names {
			load[s] = 1 + float64(i%97)
		}
		g, err := shards.New(srv.Client("b"), "g", names, &shards.Options{Identity: id, Settle: -1})
		require.NoError(t, err)
		require.NoError(t, g.Start(context.Background(), func(ctx context.Context, s *shards.Shard) error {
			s.SetLoad(load[s.Name])
			<-ctx.Done()
			return nil
		}))
		t.Cleanup(func() { _ = g.Stop(context.Background()) })
		for len(g.Owned()) < 320 {
			time.Sleep(time.Second)
		}
		time.Sleep(12 * time.Second) // past a republish, before a's leases expire

		st, err := azlease.Inspect(context.Background(), obs, "g/members/"+id)
		require.NoError(t, err)
		assert.Len(t, st.History, 8, "the fullest history")
		assert.Len(t, st.Metadata["shardloads"], 300*8, "300 loads")
		assert.True(t, strings.HasPrefix(st.Metadata["shardloadrest"], "20:"), "the rest: %q", st.Metadata["shardloadrest"])
		assert.NotEmpty(t, st.Metadata["shardin"], "IDs for the shards a hands on")
		props, err := obs.NewBlobClient("g/members/"+id).GetProperties(context.Background(), nil)
		require.NoError(t, err)
		mu.Lock()
		t.Logf("membership metadata: %d bytes; the largest write: %d bytes", metadataSize(props.Metadata), largest)
		assert.LessOrEqual(t, largest, 8<<10, "no write larger than Azure takes")
		mu.Unlock()

		a, err := shards.Inspect(context.Background(), obs, "g", names)
		require.NoError(t, err)
		require.True(t, a.ByLoad)
		for _, s := range a.Shards {
			if s.Owner == id {
				assert.True(t, s.LoadReported, "%s", s.Name[:4])
			}
		}
		require.NoError(t, g.Stop(context.Background()))
		require.NoError(t, mlock.Unlock(context.Background()))
	})
}

// fullestMembers holds member a's membership of group g by hand (weight 1),
// and writes a free membership blob for the joiner whose identity is the
// longest allowed, all escaped, with the largest epochs and a full history:
// the largest record a membership write must keep. It returns a's lock and
// the joiner's identity.
func fullestMembers(t *testing.T, obs *container.Client) (*azlease.Lock, string) {
	t.Helper()
	ml, err := azlease.NewLease(obs, "g/members/a", &azlease.LeaseOptions{Identity: "a"})
	require.NoError(t, err)
	mlock, err := ml.Hold(context.Background())
	require.NoError(t, err)
	require.NoError(t, mlock.SetMetadata(context.Background(), map[string]string{"shardweight": "1"}))

	id := strings.Repeat("%", azlease.MaxIdentity)
	var hist []string
	for i := range 8 {
		hist = append(hist, fmt.Sprintf("%d,%d,%s", 9_000_000_000_000_000_000+i, time.Now().UnixMilli(), url.QueryEscape(id)))
	}
	_, err = obs.NewBlockBlobClient("g/members/"+id).Upload(context.Background(), streaming.NopCloser(bytes.NewReader(nil)),
		&blockblob.UploadOptions{Metadata: map[string]*string{
			"azleaseepoch": to.Ptr("9000000000000000007"), "azleaseholder": to.Ptr(url.QueryEscape(id)),
			"azleaseacquired": to.Ptr(strconv.FormatInt(time.Now().UnixMilli(), 10)), "azleasereleased": to.Ptr("9000000000000000007"),
			"azleasehistory": to.Ptr(strings.Join(hist, ";")),
		}})
	require.NoError(t, err)
	return mlock, id
}
