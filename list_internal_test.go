package azlease

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/azlease/azlease/azleasetest"
)

// TestListPrefixUnderLeaseConfig: listPrefix runs under the Lease's own
// configuration: each attempt is cut at AttemptTimeout, retries stop at
// limit however many pages remain, every attempt is counted in the Lease's
// metrics as operation "list" and in its storage health.
func TestListPrefixUnderLeaseConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer func() { _ = mp.Shutdown(context.Background()) }()
		requests := func() map[string]uint64 {
			var rm metricdata.ResourceMetrics
			require.NoError(t, r.Collect(context.Background(), &rm))
			out := map[string]uint64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != "azlease.request.duration" {
						continue
					}
					for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
						op, _ := p.Attributes.Value(attrOperation)
						oc, _ := p.Attributes.Value(attrOutcome)
						lock, _ := p.Attributes.Value(attrLock)
						assert.Equal(t, "locks/sem/slot-0", lock.AsString(), "the Lease's own lock attribute")
						out[op.AsString()+"/"+oc.AsString()] += p.Count
					}
				}
			}
			return out
		}

		s := azleasetest.NewServer(t, nil)
		cc, err := s.ContainerClient("locks", "lister")
		require.NoError(t, err)
		ctx := context.Background()
		_, err = cc.Create(noRetry(ctx), nil)
		require.NoError(t, err)
		for _, n := range []string{"sem/slot-0", "sem/slot-1"} {
			_, err = cc.NewBlockBlobClient(n).UploadBuffer(noRetry(ctx), nil, nil)
			require.NoError(t, err)
		}
		l, err := NewLease(cc, "sem/slot-0", &LeaseOptions{MeterProvider: mp, AttemptTimeout: time.Second})
		require.NoError(t, err)

		var lists atomic.Int32
		var hang atomic.Bool
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op != azleasetest.OpListBlobs {
				return azleasetest.Fault{}
			}
			switch n := lists.Add(1); {
			case hang.Load():
				return azleasetest.Fault{Action: azleasetest.Hang}
			case n == 1:
				return azleasetest.Fault{Action: azleasetest.Fail} // 503
			}
			return azleasetest.Fault{}
		})
		sts, err := l.listPrefix(ctx, "sem/", time.Now().Add(10*time.Second))
		require.NoError(t, err)
		require.Len(t, sts, 2)
		assert.Equal(t, map[string]uint64{"list/transient": 1, "list/ok": 1}, requests())
		assert.Zero(t, l.health.consecutive())
		assert.Zero(t, l.seen.Load(), "other blobs' epochs are not this lock's")

		hang.Store(true)
		start := time.Now()
		_, err = l.listPrefix(ctx, "sem/", start.Add(2500*time.Millisecond))
		require.ErrorIs(t, err, ErrTransient)
		var ae *Error
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, "list", ae.Op)
		assert.Equal(t, "sem/", ae.Blob, "errors name the prefix, not the Lease's blob")
		elapsed := time.Since(start)
		assert.LessOrEqual(t, elapsed, 2500*time.Millisecond, "never past limit")
		assert.Greater(t, elapsed, 2*time.Second, "attempts of AttemptTimeout (1 s) until limit")
		assert.Equal(t, uint64(1+3), requests()["list/transient"], "two hung attempts of 1 s, and a third cut at limit")
		assert.GreaterOrEqual(t, l.health.consecutive(), int64(2))

		dctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = l.listPrefix(dctx, "sem/", time.Now().Add(time.Minute))
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "list locks/sem/")
	})
}

// TestStatusesOf: a page converts blob by blob; a blob the service should
// not have listed is left out, one without a name spoils the page.
func TestStatusesOf(t *testing.T) {
	state := func(s string) *container.BlobProperties {
		ls := lease.StateType(s)
		return &container.BlobProperties{LeaseState: &ls}
	}
	sts, err := statusesOf("c", "p/", []*container.BlobItem{
		{Name: to.Ptr("p/a"), Properties: state("breaking"), Metadata: map[string]*string{"azleaseepoch": to.Ptr("4"), "azleaseholder": to.Ptr("n%20a"), "x": to.Ptr("1")}},
		{Name: to.Ptr("q/outside")},
		{Name: to.Ptr("p/b")}, // no properties, no metadata
		{Name: to.Ptr("p/c"), Properties: state("leased"), Metadata: map[string]*string{"azleaseepoch": to.Ptr("-1")}},
	})
	require.NoError(t, err)
	require.Len(t, sts, 3)
	assert.Equal(t, "p/a", sts[0].Name)
	assert.True(t, sts[0].Leased)
	assert.Equal(t, uint64(4), sts[0].Epoch)
	assert.Equal(t, "n a", sts[0].Holder)
	assert.Equal(t, map[string]string{"x": "1"}, sts[0].Metadata)
	assert.True(t, sts[1].Exists)
	assert.Empty(t, sts[1].State)
	assert.Equal(t, map[string]string{}, sts[1].Metadata)
	require.ErrorIs(t, sts[2].Err, ErrPermanent)
	require.ErrorIs(t, sts[2].Err, errBadEpoch)
	assert.True(t, sts[2].Leased)

	for _, bad := range []*container.BlobItem{nil, {}, {Name: to.Ptr("")}} {
		_, err := statusesOf("c", "", []*container.BlobItem{bad})
		require.ErrorIs(t, err, errNoName)
	}
}

// bodyTransport answers every request 200 with body, as a List Blobs
// answer.
type bodyTransport []byte

func (b bodyTransport) Do(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusOK, Request: req, Header: http.Header{"Content-Type": {"application/xml"}},
		Body: io.NopCloser(bytes.NewReader(b)),
	}, nil
}

// FuzzListPage: whatever XML a List Blobs answer holds, azblob's parse of it
// converts without a panic; each status listed is under the prefix and
// exists, Leased follows State, and a record error is the epoch's.
func FuzzListPage(f *testing.F) {
	f.Add(`<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://h/a/" ContainerName="c">` +
		`<Blobs><Blob><Name>p/a</Name><Properties><LeaseState>leased</LeaseState><LeaseStatus>locked</LeaseStatus></Properties>` +
		`<Metadata><azleaseepoch>3</azleaseepoch><Owner>x</Owner></Metadata></Blob></Blobs><NextMarker /></EnumerationResults>`)
	f.Add(`<EnumerationResults><Blobs><Blob><Name Encoded="true">p%2Fb%01</Name><Metadata><azleaseepoch>x</azleaseepoch>` +
		`<azleasehistory>1,2,%zz;;</azleasehistory></Metadata></Blob><Blob></Blob></Blobs></EnumerationResults>`)
	f.Add(`<EnumerationResults><Blobs><Blob><Name>p/c</Name><Metadata><a/><AZLEASEEPOCH>18446744073709551615</AZLEASEEPOCH>` +
		`<AzLeaseEpoch>1</AzLeaseEpoch></Metadata></Blob><Blob><Name>q</Name></Blob></Blobs><NextMarker>m</NextMarker></EnumerationResults>`)
	f.Add(`<EnumerationResults><Blobs><Blob><Name Encoded="true">%zz</Name></Blob></Blobs></EnumerationResults>`)
	f.Fuzz(func(t *testing.T, body string) {
		cc, err := container.NewClientWithNoCredential("http://127.0.0.1:1/acct/c", &container.ClientOptions{
			ClientOptions: azcore.ClientOptions{Transport: bodyTransport(body), Retry: policy.RetryOptions{MaxRetries: -1}},
		})
		require.NoError(t, err)
		resp, err := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("p")}).NextPage(context.Background())
		if err != nil || resp.Segment == nil {
			return
		}
		sts, err := statusesOf("c", "p", resp.Segment.BlobItems)
		if err != nil {
			require.ErrorIs(t, err, errNoName)
			return
		}
		for _, st := range sts {
			require.True(t, strings.HasPrefix(st.Name, "p"))
			require.True(t, st.Exists)
			require.Equal(t, st.State == "leased" || st.State == "breaking", st.Leased)
			if st.Err != nil {
				require.ErrorIs(t, st.Err, errBadEpoch)
				require.Zero(t, st.Epoch)
			}
			for k := range st.Metadata {
				require.False(t, strings.HasPrefix(k, metaPrefix))
			}
		}
	})
}
