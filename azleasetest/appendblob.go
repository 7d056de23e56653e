package azleasetest

// Append blobs and ranged reads, as Azure documents them:
//
//   - Put Blob with x-ms-blob-type: AppendBlob creates an empty append blob
//     (a body is refused: Put Blob only initialises one), with metadata and
//     conditions as any Put Blob.
//   - Append Block (PUT ?comp=appendblock, [OpAppendBlock]) adds its body
//     at the end of an existing append blob and answers 201 with
//     x-ms-blob-append-offset (where the block went: the length before it)
//     and x-ms-blob-committed-block-count (the blocks now committed). It
//     takes the lease and the If-* conditions as any write, and two of its
//     own: x-ms-blob-condition-appendpos (412 AppendPositionConditionNotMet
//     unless the blob's length is that number: a compare-and-swap on the
//     end) and x-ms-blob-condition-maxsize (412 MaxBlobSizeConditionNotMet
//     if the block would take the blob past that many bytes). An append
//     blob holds at most 50,000 blocks (409 BlockCountExceedsLimit after
//     that); Append Block on another type of blob answers 409
//     InvalidBlobType, on a missing blob 404 BlobNotFound, and an empty
//     block 400 InvalidHeaderValue. Appends without a condition never
//     conflict: storage orders them.
//   - Get Blob Properties and Get Blob report an append blob's committed
//     block count (x-ms-blob-committed-block-count), and List Blobs its
//     BlobType.
//   - Get Blob reads a range (Range or x-ms-range, the latter first):
//     bytes=START- or bytes=START-END, END past the end meaning the end;
//     206 with Content-Range "bytes START-END/SIZE". A range that starts at
//     or past the end (any range of an empty blob) answers 416 InvalidRange
//     with Content-Range "bytes */SIZE" (Azurite 3.35.0 serves a range that
//     starts exactly at the end as an empty 206: see the conformance table).
//
// What the emulator does not implement it refuses: other range forms
// (several ranges, a suffix "bytes=-N", another unit) with 400
// InvalidHeaderValue; page blobs (x-ms-blob-type: PageBlob) with 400
// InvalidHeaderValue; Append Block From URL with 400 UnsupportedHeader; Seal
// with 400 UnsupportedQueryParameter, as every operation it does not know. It keeps
// append blobs up to 64 MiB in memory (Azure: about 195 GiB) and blocks of
// up to 4 MiB (Azure: 100 MiB), answering 413 RequestBodyTooLarge beyond.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Blob types, as x-ms-blob-type and List Blobs' BlobType name them.
const (
	blockBlob  = "BlockBlob"
	appendBlob = "AppendBlob"
)

// maxAppendBlocks is the most blocks an append blob holds, as on Azure.
const maxAppendBlocks = 50000

// maxAppendBlobSize bounds what the emulator keeps in memory for one append
// blob.
const maxAppendBlobSize = 64 << 20

// blobTypeOf reads a Put Blob's x-ms-blob-type: "" is a block blob.
func (s *Server) blobTypeOf(h http.Header) (string, *result) {
	switch t := h.Get("x-ms-blob-type"); t {
	case "", blockBlob:
		return blockBlob, nil
	case appendBlob:
		return appendBlob, nil
	default:
		return "", s.fail(http.StatusBadRequest, "InvalidHeaderValue", "the emulator implements block and append blobs only, not x-ms-blob-type "+strconv.Quote(t))
	}
}

// appendBlock answers Append Block on b; now is the server's time.
func (s *Server) appendBlock(b *blobState, req *request, body []byte, now time.Time) *result {
	if b.blobType != appendBlob {
		return s.fail(http.StatusConflict, "InvalidBlobType", "")
	}
	if res := s.checkWriteLease(b, req, now); res != nil {
		return res
	}
	if res := s.checkConditions(req.Header, b, true); res != nil {
		return res
	}
	if req.Header.Get("x-ms-copy-source") != "" {
		return s.fail(http.StatusBadRequest, "UnsupportedHeader", "the emulator does not implement Append Block From URL")
	}
	if len(body) == 0 {
		return s.fail(http.StatusBadRequest, "InvalidHeaderValue", "an appended block cannot be empty")
	}
	if len(body) > maxBlobSize {
		return s.fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the emulator takes blocks up to 4 MiB")
	}
	if b.blocks >= maxAppendBlocks {
		return s.fail(http.StatusConflict, "BlockCountExceedsLimit", "")
	}
	size := int64(len(b.content))
	if v, ok, res := s.int64Header(req.Header, "x-ms-blob-condition-appendpos"); res != nil {
		return res
	} else if ok && v != size {
		return s.fail(http.StatusPreconditionFailed, "AppendPositionConditionNotMet", "")
	}
	if v, ok, res := s.int64Header(req.Header, "x-ms-blob-condition-maxsize"); res != nil {
		return res
	} else if ok && size+int64(len(body)) > v {
		return s.fail(http.StatusPreconditionFailed, "MaxBlobSizeConditionNotMet", "")
	}
	if size+int64(len(body)) > maxAppendBlobSize {
		return s.fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the emulator keeps append blobs up to 64 MiB")
	}
	s.afterWrite(b, req, now)
	b.content = append(b.content, body...)
	b.blocks++
	b.etag = s.newETag()
	b.lastModified = now
	h := stamp(b.etag, b.lastModified)
	h.Set("x-ms-blob-append-offset", strconv.FormatInt(size, 10))
	h.Set("x-ms-blob-committed-block-count", strconv.Itoa(b.blocks))
	h.Set("x-ms-request-server-encrypted", "true")
	return &result{status: http.StatusCreated, header: h, applied: true}
}

// int64Header reads a header that holds a byte count: ok is false when it
// is absent; a value that is not a number from 0 up is refused with 400
// InvalidHeaderValue.
func (s *Server) int64Header(h http.Header, name string) (v int64, ok bool, res *result) {
	raw := h.Get(name)
	if raw == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || v < 0 {
		return 0, false, s.fail(http.StatusBadRequest, "InvalidHeaderValue", name+" must be a byte count")
	}
	return v, true, nil
}

// byteRange is a range a Get Blob asked for: from start to end, both
// included; end is -1 for "to the end".
type byteRange struct{ start, end int64 }

// parseRange reads a Range header value as the emulator implements it:
// bytes=START- or bytes=START-END with START <= END. ok is false for any
// other form.
func parseRange(v string) (r byteRange, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(v), "bytes=")
	if !found {
		return byteRange{}, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found || a == "" || strings.TrimLeft(a, "0123456789") != "" || strings.TrimLeft(b, "0123456789") != "" {
		return byteRange{}, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return byteRange{}, false
	}
	r = byteRange{start: start, end: -1}
	if b != "" {
		end, err := strconv.ParseInt(b, 10, 64)
		if err != nil || end < start {
			return byteRange{}, false
		}
		r.end = end
	}
	return r, true
}

// rangeOf returns the range a Get Blob asks for (x-ms-range first, then
// Range), or present false when it asks for the whole blob; res is the
// refusal of a form the emulator does not implement.
func (s *Server) rangeOf(h http.Header) (r byteRange, present bool, res *result) {
	v := h.Get("x-ms-range")
	if v == "" {
		v = h.Get("Range")
	}
	if v == "" {
		return byteRange{}, false, nil
	}
	r, ok := parseRange(v)
	if !ok {
		return byteRange{}, false, s.fail(http.StatusBadRequest, "InvalidHeaderValue", "the emulator reads ranges bytes=START- and bytes=START-END only")
	}
	return r, true, nil
}

// serveRange narrows res, a Get Blob's whole answer for content, to the range
// r: 206 with Content-Range, or 416 InvalidRange when r starts at or past the
// end.
func (s *Server) serveRange(res *result, content []byte, r byteRange) *result {
	size := int64(len(content))
	if r.start >= size {
		bad := s.fail(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "")
		bad.header.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		return bad
	}
	end := r.end
	if end < 0 || end >= size {
		end = size - 1
	}
	res.status = http.StatusPartialContent
	res.body = append([]byte{}, content[r.start:end+1]...)
	res.header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", r.start, end, size))
	res.header.Set("Content-Length", strconv.FormatInt(end-r.start+1, 10))
	return res
}
