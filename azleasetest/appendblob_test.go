package azleasetest_test

// The emulator's reading of what clients send with append blobs and ranged
// reads (appendblob.go): the conformance table (conformance_test.go) holds
// the behaviour on both backends; these fuzz the headers it parses.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// FuzzAppendHeaders: any Range (or x-ms-range) a Get Blob sends, and any
// append-position and maximum-size conditions an Append Block sends, are
// answered without a panic, with a status Azure documents for them; a 206
// carries exactly the bytes its Content-Range names, and an Append Block
// changes the blob only when it answers 201, by exactly its block at the
// offset it reports.
func FuzzAppendHeaders(f *testing.F) {
	f.Add("bytes=0-4", "", "5", "")
	f.Add("bytes=3-", "bytes=1-1", "", "100")
	f.Add("bytes=12-", "", "-1", "12")
	f.Add("bytes=5-3", "", "99999999999999999999", "0")
	f.Add("bytes=-5", "items=0-1", "0x5", "+7")
	f.Add("bytes=0-1,3-4", "", " 5", "")
	s := azleasetest.New(&azleasetest.Options{AllowAnyKey: true})
	f.Cleanup(s.Close)
	cc, err := s.ContainerClient("fuzz", "")
	require.NoError(f, err)
	ctx := raw(context.Background())
	_, err = cc.Create(ctx, nil)
	require.NoError(f, err)
	ab := cc.NewAppendBlobClient("log")
	_, err = ab.Create(ctx, nil)
	require.NoError(f, err)
	_, err = ab.AppendBlock(ctx, streaming.NopCloser(bytes.NewReader([]byte("helloworld!x"))), nil)
	require.NoError(f, err)
	url := "http://127.0.0.1:10000/" + azleasetest.Account + "/fuzz/log"
	content := func(t *testing.T) []byte {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
		require.Equal(t, http.StatusOK, rec.Code)
		return rec.Body.Bytes()
	}
	f.Fuzz(func(t *testing.T, rng, xmsRange, appendPos, maxSize string) {
		before := content(t)
		req := httptest.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Range", rng)
		req.Header.Set("x-ms-range", xmsRange)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusPartialContent:
			var start, end, size int
			_, err := fmt.Sscanf(rec.Header().Get("Content-Range"), "bytes %d-%d/%d", &start, &end, &size)
			require.NoError(t, err)
			require.Equal(t, len(before), size)
			require.True(t, 0 <= start && start <= end && end < size, rec.Header().Get("Content-Range"))
			require.Equal(t, before[start:end+1], rec.Body.Bytes())
			require.Equal(t, strconv.Itoa(end-start+1), rec.Header().Get("Content-Length"))
		case http.StatusRequestedRangeNotSatisfiable:
			require.Equal(t, "InvalidRange", rec.Header().Get("x-ms-error-code"))
			require.Equal(t, fmt.Sprintf("bytes */%d", len(before)), rec.Header().Get("Content-Range"))
		default:
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Equal(t, "InvalidHeaderValue", rec.Header().Get("x-ms-error-code"))
		}

		block := []byte("+")
		req = httptest.NewRequest(http.MethodPut, url+"?comp=appendblock", bytes.NewReader(block))
		req.Header.Set("x-ms-blob-condition-appendpos", appendPos)
		req.Header.Set("x-ms-blob-condition-maxsize", maxSize)
		rec = httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		after := content(t)
		switch rec.Code {
		case http.StatusCreated:
			require.Equal(t, strconv.Itoa(len(before)), rec.Header().Get("x-ms-blob-append-offset"))
			require.Equal(t, append(before, block...), after)
		case http.StatusBadRequest:
			require.Equal(t, "InvalidHeaderValue", rec.Header().Get("x-ms-error-code"))
			require.Equal(t, before, after)
		case http.StatusPreconditionFailed:
			require.Contains(t, []string{"AppendPositionConditionNotMet", "MaxBlobSizeConditionNotMet"}, rec.Header().Get("x-ms-error-code"))
			require.Equal(t, before, after)
		default:
			require.Equal(t, http.StatusConflict, rec.Code, rec.Header().Get("x-ms-error-code"))
			require.Equal(t, "BlockCountExceedsLimit", rec.Header().Get("x-ms-error-code"))
			require.Equal(t, before, after)
		}
	})
}
