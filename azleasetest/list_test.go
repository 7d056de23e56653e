package azleasetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// listAll lists the blobs under prefix with pages of at most max (0: the
// server's default), and returns the names page by page and every item.
func listAll(ctx context.Context, t *testing.T, cc *container.Client, prefix string, max int32) ([][]string, []*container.BlobItem) {
	t.Helper()
	opts := &container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}}
	if max > 0 {
		opts.MaxResults = &max
	}
	pager := cc.NewListBlobsFlatPager(opts)
	var pages [][]string
	var items []*container.BlobItem
	for n := 0; pager.More(); n++ {
		require.Less(t, n, 10000, "too many pages")
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		var names []string
		for _, it := range page.Segment.BlobItems {
			names = append(names, *it.Name)
			items = append(items, it)
		}
		pages = append(pages, names)
	}
	return pages, items
}

// TestListBlobsPrefixOrderAndPaging: a prefix is a plain string prefix
// ("a/slot-1" lists "a/slot-10" too), names come in the byte order of their
// UTF-8, pages hold maxresults names and the marker resumes after them,
// also when the blob it names was deleted meanwhile; a name XML cannot
// carry comes back intact (percent-encoded on the wire).
func TestListBlobsPrefixOrderAndPaging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.NewServer(t, nil)
		cc := s.Client("lister")
		ctx := raw(context.Background())
		names := []string{"a/slot-2", "a/slot-10", "a/slot-1", "a/slot-é", "a/slot-z", "a/Slot-0", "a/slot-\x01ctl", "a", "b/slot-1", "a/slot-1/x"}
		for _, n := range names {
			_, err := cc.NewBlockBlobClient(n).UploadBuffer(ctx, nil, nil)
			require.NoError(t, err)
		}
		pages, _ := listAll(ctx, t, cc, "a/slot-1", 0)
		assert.Equal(t, [][]string{{"a/slot-1", "a/slot-1/x", "a/slot-10"}}, pages)
		pages, _ = listAll(ctx, t, cc, "a/", 0)
		assert.Equal(t, [][]string{{"a/Slot-0", "a/slot-\x01ctl", "a/slot-1", "a/slot-1/x", "a/slot-10", "a/slot-2", "a/slot-z", "a/slot-é"}}, pages)
		pages, _ = listAll(ctx, t, cc, "", 3)
		assert.Equal(t, [][]string{
			{"a", "a/Slot-0", "a/slot-\x01ctl"}, {"a/slot-1", "a/slot-1/x", "a/slot-10"}, {"a/slot-2", "a/slot-z", "a/slot-é"}, {"b/slot-1"},
		}, pages)
		pages, _ = listAll(ctx, t, cc, "c", 0)
		assert.Empty(t, pages[0])

		// The marker names where to resume, not a blob that must still exist.
		pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("a/slot-"), MaxResults: to.Ptr(int32(2))})
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		require.Len(t, page.Segment.BlobItems, 2)
		_, err = cc.NewBlobClient("a/slot-1/x").Delete(ctx, nil) // the next page's first blob
		require.NoError(t, err)
		page, err = pager.NextPage(ctx)
		require.NoError(t, err)
		require.Len(t, page.Segment.BlobItems, 2)
		assert.Equal(t, "a/slot-10", *page.Segment.BlobItems[0].Name)
		assert.Equal(t, "a/slot-2", *page.Segment.BlobItems[1].Name)
	})
}

// TestListBlobsLeaseStates: each blob lists the lease state in effect at
// the request's instant on the server's clock, as Get Blob Properties
// reports it: an expired lease as expired, a breaking lease whose period
// passed as broken, the server's clock rate included.
func TestListBlobsLeaseStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.NewServer(t, nil)
		cc := s.Client("lister")
		ctx := raw(context.Background())
		take := func(name string, secs int32) *lease.BlobClient {
			_, err := cc.NewBlockBlobClient(name).UploadBuffer(ctx, nil, nil)
			require.NoError(t, err)
			lc, err := lease.NewBlobClient(cc.NewBlobClient(name), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
			require.NoError(t, err)
			if secs != 0 {
				_, err = lc.AcquireLease(ctx, secs, nil)
				require.NoError(t, err)
			}
			return lc
		}
		take("l/available", 0)
		take("l/leased", 60)
		take("l/infinite", -1)
		take("l/expires", 15)
		_, err := take("l/breaking", 60).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(30))})
		require.NoError(t, err)
		_, err = take("l/breaks", 60).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(5))})
		require.NoError(t, err)
		_, err = take("l/broken", 60).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))})
		require.NoError(t, err)
		_, err = take("l/released", 60).ReleaseLease(ctx, nil)
		require.NoError(t, err)

		states := func() string {
			_, items := listAll(ctx, t, cc, "l/", 0)
			var b strings.Builder
			for _, it := range items {
				p := it.Properties
				fmt.Fprintf(&b, "%s=%s,%s", strings.TrimPrefix(*it.Name, "l/"), *p.LeaseState, *p.LeaseStatus)
				if p.LeaseDuration != nil {
					fmt.Fprintf(&b, ",%s", *p.LeaseDuration)
				}
				b.WriteString(" ")
				// The same as Get Blob Properties says, at the same instant.
				props, err := cc.NewBlobClient(*it.Name).GetProperties(ctx, nil)
				require.NoError(t, err)
				assert.Equal(t, *props.LeaseState, *p.LeaseState, *it.Name)
				assert.Equal(t, *props.LeaseStatus, *p.LeaseStatus, *it.Name)
				assert.Equal(t, props.LeaseDuration, p.LeaseDuration, *it.Name)
			}
			return strings.TrimSpace(b.String())
		}
		assert.Equal(t, "available=available,unlocked breaking=breaking,locked breaks=breaking,locked broken=broken,unlocked "+
			"expires=leased,locked,fixed infinite=leased,locked,infinite leased=leased,locked,fixed released=available,unlocked", states())
		time.Sleep(15 * time.Second)
		assert.Equal(t, "available=available,unlocked breaking=breaking,locked breaks=broken,unlocked broken=broken,unlocked "+
			"expires=expired,unlocked infinite=leased,locked,infinite leased=leased,locked,fixed released=available,unlocked", states())
		s.SetClockRate(2) // 23 local seconds are 46 on the server: 61 s after the acquisitions
		time.Sleep(23 * time.Second)
		assert.Equal(t, "available=available,unlocked breaking=broken,unlocked breaks=broken,unlocked broken=broken,unlocked "+
			"expires=expired,unlocked infinite=leased,locked,infinite leased=expired,unlocked released=available,unlocked", states())
	})
}

// TestListBlobsProperties: a listed blob carries the properties Get Blob
// Properties reports (the ETag without its quotes, as Azure lists it), and
// with include=metadata its metadata; without it, none.
func TestListBlobsProperties(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.NewServer(t, nil)
		cc := s.Client("lister")
		ctx := raw(context.Background())
		bb := cc.NewBlockBlobClient("p/one")
		_, err := bb.UploadBuffer(ctx, []byte("hello"), &blockblob.UploadBufferOptions{
			Metadata:    map[string]*string{"Owner": to.Ptr("ops & <dev>"), "azleaseepoch": to.Ptr("7"), "empty": to.Ptr("")},
			HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr("text/plain")},
		})
		require.NoError(t, err)
		time.Sleep(time.Second)
		_, err = bb.SetMetadata(ctx, map[string]*string{"Owner": to.Ptr("ops & <dev>"), "azleaseepoch": to.Ptr("8"), "empty": to.Ptr("")}, nil)
		require.NoError(t, err)
		props, err := bb.GetProperties(ctx, nil)
		require.NoError(t, err)

		_, items := listAll(ctx, t, cc, "p/", 0)
		require.Len(t, items, 1)
		p := items[0].Properties
		assert.Equal(t, strings.Trim(string(*props.ETag), `"`), string(*p.ETag))
		assert.Equal(t, *props.LastModified, *p.LastModified)
		assert.Equal(t, *props.CreationTime, *p.CreationTime)
		assert.True(t, p.CreationTime.Before(*p.LastModified))
		assert.Equal(t, int64(5), *p.ContentLength)
		assert.Equal(t, "text/plain", *p.ContentType)
		assert.Equal(t, container.BlobTypeBlockBlob, *p.BlobType)
		// azblob lower-cases metadata names in a listing.
		assert.Equal(t, map[string]*string{"owner": to.Ptr("ops & <dev>"), "azleaseepoch": to.Ptr("8"), "empty": to.Ptr("")}, items[0].Metadata)

		pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("p/")})
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		require.Len(t, page.Segment.BlobItems, 1)
		assert.Nil(t, page.Segment.BlobItems[0].Metadata, "no include=metadata, no metadata")
	})
}

// serveRaw sends one request to s (which must allow any key) and returns
// the status, the error code and the body.
func serveRaw(t *testing.T, s *azleasetest.Server, method, target string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, rec.Header().Get("x-ms-error-code"), string(body)
}

// TestListBlobsWire: the XML itself, where azblob would hide a detail: the
// metadata names as they were stored, the parameters echoed, the
// ServiceEndpoint, an empty NextMarker when the listing is complete.
func TestListBlobsWire(t *testing.T) {
	s := azleasetest.New(&azleasetest.Options{AllowAnyKey: true})
	defer s.Close()
	base := "http://127.0.0.1:10000/" + azleasetest.Account + "/list1"
	code, _, _ := serveRaw(t, s, http.MethodPut, base+"?restype=container")
	require.Equal(t, http.StatusCreated, code)
	req := httptest.NewRequest(http.MethodPut, base+"/x/a", nil)
	req.Header["x-ms-meta-OwnerName"] = []string{"ops"} // not canonicalised, as no transport would leave it
	req.Header.Set("x-ms-blob-type", "BlockBlob")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	code, _, body := serveRaw(t, s, http.MethodGet, base+"?restype=container&comp=list&prefix=x%2F&maxresults=10&include=metadata")
	require.Equal(t, http.StatusOK, code, body)
	for _, want := range []string{
		`<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1/" ContainerName="list1">`,
		"<Prefix>x/</Prefix>", "<MaxResults>10</MaxResults>", "<Name>x/a</Name>",
		"<Metadata><OwnerName>ops</OwnerName></Metadata>", "<LeaseState>available</LeaseState>",
		"<LeaseStatus>unlocked</LeaseStatus>", "<NextMarker />",
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "<Marker>")
	assert.NotContains(t, body, "<LeaseDuration>", "only a leased blob has a lease duration")

	// Refusals, as Azure answers them; and what the emulator does not
	// implement, refused rather than ignored.
	for _, c := range []struct{ query, code string }{
		{"maxresults=0", "OutOfRangeQueryParameterValue"},
		{"maxresults=-3", "OutOfRangeQueryParameterValue"},
		{"maxresults=-99999999999999999999", "OutOfRangeQueryParameterValue"},
		{"maxresults=ten", "InvalidQueryParameterValue"},
		{"include=metadata,bogus", "InvalidQueryParameterValue"},
		{"marker=not-a-marker", "InvalidQueryParameterValue"},
		{"delimiter=%2F", "UnsupportedQueryParameter"},
		{"startFrom=x", "UnsupportedQueryParameter"},
	} {
		code, errCode, _ := serveRaw(t, s, http.MethodGet, base+"?restype=container&comp=list&"+c.query)
		assert.Equal(t, http.StatusBadRequest, code, c.query)
		assert.Equal(t, c.code, errCode, c.query)
	}
	for _, q := range []string{"maxresults=99999999999999999999", "maxresults=5001", "include=snapshots,versions,tags&timeout=30"} {
		code, _, body := serveRaw(t, s, http.MethodGet, base+"?restype=container&comp=list&"+q)
		assert.Equal(t, http.StatusOK, code, q)
		assert.Contains(t, body, "<Name>x/a</Name>", q)
	}
	code, errCode, _ := serveRaw(t, s, http.MethodGet, "http://127.0.0.1:10000/"+azleasetest.Account+"/nothere?restype=container&comp=list")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "ContainerNotFound", errCode)
}

// TestListBlobsMaxResultsCap: more than 5,000 blobs take two answers,
// whatever maxresults asks for.
func TestListBlobsMaxResultsCap(t *testing.T) {
	s := azleasetest.New(&azleasetest.Options{AllowAnyKey: true})
	defer s.Close()
	base := "http://127.0.0.1:10000/" + azleasetest.Account + "/many"
	code, _, _ := serveRaw(t, s, http.MethodPut, base+"?restype=container")
	require.Equal(t, http.StatusCreated, code)
	for i := range 5001 { // straight to the handler: azblob's pipeline would take seconds
		code, _, body := serveRaw(t, s, http.MethodPut, fmt.Sprintf("%s/m/%05d", base, i))
		require.Equal(t, http.StatusCreated, code, body)
	}
	cc, err := s.ContainerClient("many", "")
	require.NoError(t, err)
	pages, _ := listAll(raw(context.Background()), t, cc, "m/", 0)
	require.Len(t, pages, 2)
	assert.Len(t, pages[0], 5000)
	assert.Equal(t, []string{"m/05000"}, pages[1])
	// The rest on the wire: azblob's XML decoding takes seconds with -race.
	for _, max := range []string{"5001", "1073741824", "99999999999999999999"} {
		code, _, body := serveRaw(t, s, http.MethodGet, base+"?restype=container&comp=list&maxresults="+max)
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, 5000, strings.Count(body, "<Blob>"), max)
		assert.Contains(t, body, "<NextMarker>emu1!", max)
	}
}

// TestListBlobsFaults: a listing goes through the fault machinery as every
// other read: the hook sees OpListBlobs, and outages, lost answers and
// partitions apply to it.
func TestListBlobsFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.NewServer(t, nil)
		cc := s.Client("lister")
		ctx := raw(context.Background())
		_, err := cc.NewBlockBlobClient("f/a").UploadBuffer(ctx, nil, nil)
		require.NoError(t, err)
		list := func(ctx context.Context) error {
			_, err := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("f/")}).NextPage(ctx)
			return err
		}

		var seen atomic.Int32
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpListBlobs {
				assert.Equal(t, "lister", r.Client)
				assert.Equal(t, azleasetest.Container, r.Container)
				assert.Empty(t, r.Blob)
				assert.False(t, r.Op.IsLease())
				seen.Add(1)
				return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusInternalServerError, Code: "InternalError"}
			}
			return azleasetest.Fault{}
		})
		var re *azcore.ResponseError
		require.ErrorAs(t, list(ctx), &re)
		assert.Equal(t, "InternalError", re.ErrorCode)
		assert.Equal(t, int32(1), seen.Load())
		s.ClearFaults()

		s.Outage()
		require.ErrorAs(t, list(ctx), &re)
		assert.Equal(t, "ServerBusy", re.ErrorCode)
		s.Restore()

		s.LoseResponses("lister", 1)
		require.ErrorIs(t, list(ctx), azleasetest.ErrConnectionLost)
		s.ClearFaults()

		s.Partition("lister", azleasetest.Blackhole)
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start := time.Now()
		err = list(actx)
		cancel()
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		assert.Equal(t, 3*time.Second, time.Since(start), "a blackholed listing hangs until its deadline")
		s.Heal("lister")
		require.NoError(t, list(ctx))
	})
}

// TestListBlobsWrongKey: a listing signed with another key is refused, as
// every other request is.
func TestListBlobsWrongKey(t *testing.T) {
	s := azleasetest.New(nil)
	defer s.Close()
	ctx := raw(context.Background())
	good := sharedKeyClient(t, localServiceURL, azleasetest.Account, azleasetest.AccountKey, s.Transport(""))
	_, err := good.Create(ctx, nil)
	require.NoError(t, err)
	bad := sharedKeyClient(t, localServiceURL, azleasetest.Account, wrongKey, s.Transport(""))
	_, err = bad.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("x y/")}).NextPage(ctx)
	requireAuthFailed(t, err)
	_, err = good.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("x y/")}).NextPage(ctx)
	require.NoError(t, err)
}

// FuzzListQuery: any query string a client sends a listing is answered
// without a panic, and every 200 answer is XML that azblob parses into
// blobs in name order.
func FuzzListQuery(f *testing.F) {
	f.Add("prefix=a%2F&maxresults=2&include=metadata")
	f.Add("marker=emu1!YS9i&maxresults=1")
	f.Add("marker=emu1!%FF&prefix=%00")
	f.Add("maxresults=+7&include=,,METADATA")
	f.Add("prefix=%01&include=metadata&include=tags")
	s := azleasetest.New(&azleasetest.Options{AllowAnyKey: true})
	f.Cleanup(s.Close)
	cc, err := s.ContainerClient("fuzz", "")
	require.NoError(f, err)
	ctx := raw(context.Background())
	_, err = cc.Create(ctx, nil)
	require.NoError(f, err)
	for _, n := range []string{"a", "a/b", "a/\x01", "a/é", "b"} {
		_, err := cc.NewBlockBlobClient(n).UploadBuffer(ctx, nil, &blockblob.UploadBufferOptions{
			Metadata: map[string]*string{"k": to.Ptr("v&<>")}})
		require.NoError(f, err)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		q.Set("restype", "container")
		q.Set("comp", "list")
		target := "http://127.0.0.1:10000/" + azleasetest.Account + "/fuzz?" + q.Encode()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusOK {
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.NotEmpty(t, rec.Header().Get("x-ms-error-code"))
			return
		}
		// The same listing through azblob parses.
		opts := &container.ListBlobsFlatOptions{Prefix: to.Ptr(q.Get("prefix")), Include: container.ListBlobsInclude{Metadata: true}}
		if m := q.Get("marker"); m != "" {
			opts.Marker = &m
		}
		page, err := cc.NewListBlobsFlatPager(opts).NextPage(ctx)
		if err != nil {
			var re *azcore.ResponseError
			require.ErrorAs(t, err, &re, "a 200 answer azblob cannot parse")
			return
		}
		prev := ""
		for _, it := range page.Segment.BlobItems {
			require.NotNil(t, it.Name)
			require.True(t, strings.HasPrefix(*it.Name, q.Get("prefix")))
			require.Greater(t, *it.Name, prev)
			prev = *it.Name
			require.Equal(t, "v&<>", *it.Metadata["k"])
		}
	})
}
