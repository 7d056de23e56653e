package azleasetest

import (
	"encoding/base64"
	"encoding/xml"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// List Blobs (GET ?restype=container&comp=list), as Azure documents it, for
// a flat listing: the blobs of a container whose names start with prefix,
// in lexicographic order of their UTF-8 bytes, at most maxresults (default
// and most 5,000) per answer, the rest behind an opaque NextMarker. Each
// blob carries its properties, with the lease state in effect at the
// request's instant on the server's clock (an expired lease lists as
// expired, a breaking lease whose period has passed as broken), and, with
// include=metadata, its metadata with the names as they were stored.
//
// What the emulator does not implement it refuses rather than ignores when
// ignoring would change the answer: a delimiter (hierarchical listing) and
// startFrom are answered 400 UnsupportedQueryParameter. The include values
// other than metadata (snapshots, versions, deleted, tags, copy,
// uncommittedblobs, immutabilitypolicy, legalhold, permissions,
// deletedwithversions) are accepted and change nothing: the emulator keeps
// no snapshots, versions, deleted blobs, tags, copies or uncommitted
// blocks, so there is nothing to add. timeout is accepted and ignored, as
// for every operation. The request goes through authentication and fault
// injection like any other, as [OpListBlobs].

// maxListResults is the most blobs one List Blobs answer holds, and the
// number it holds when maxresults is not given.
const maxListResults = 5000

// listIncludes are the include values Azure documents for List Blobs.
var listIncludes = map[string]bool{
	"copy": true, "deleted": true, "deletedwithversions": true, "immutabilitypolicy": true, "legalhold": true,
	"metadata": true, "snapshots": true, "tags": true, "uncommittedblobs": true, "versions": true, "permissions": true,
}

// markerPrefix starts every marker the emulator hands out; the rest is the
// name of the next blob to list, base64-encoded, so that clients treat
// markers as the opaque strings Azure's are.
const markerPrefix = "emu1!"

func encodeMarker(next string) string {
	return markerPrefix + base64.RawURLEncoding.EncodeToString([]byte(next))
}

func decodeMarker(m string) (string, bool) {
	rest, ok := strings.CutPrefix(m, markerPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	return string(b), err == nil
}

// listQuery is a List Blobs request's parameters, validated.
type listQuery struct {
	prefix, marker string
	after          string // the first name the page may list (decoded marker)
	max            int
	maxGiven       string // maxresults as sent, echoed; "" when absent
	metadata       bool
}

// parseListQuery validates the parameters of a List Blobs request, or
// returns the refusal Azure (or, for what it does not implement, the
// emulator) answers.
func (s *Server) parseListQuery(q url.Values) (listQuery, *result) {
	lq := listQuery{prefix: q.Get("prefix"), marker: q.Get("marker"), max: maxListResults}
	for _, p := range []string{"delimiter", "startFrom"} {
		if _, ok := q[p]; ok {
			return lq, s.fail(http.StatusBadRequest, "UnsupportedQueryParameter",
				"the emulator lists blobs flat only: "+p+" is not implemented")
		}
	}
	if v, ok := q["maxresults"]; ok {
		lq.maxGiven = strings.Join(v, ",")
		n, err := strconv.Atoi(lq.maxGiven)
		if errors.Is(err, strconv.ErrRange) { // a number, too large either way
			n, err = maxListResults+1, nil
			if strings.HasPrefix(lq.maxGiven, "-") {
				n = 0
			}
		}
		switch {
		case err != nil:
			return lq, s.fail(http.StatusBadRequest, "InvalidQueryParameterValue", "")
		case n <= 0:
			return lq, s.fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "")
		default:
			lq.max = min(n, maxListResults)
		}
	}
	for _, v := range q["include"] {
		for _, item := range strings.Split(v, ",") {
			item = strings.ToLower(strings.TrimSpace(item))
			if item == "" {
				continue
			}
			if !listIncludes[item] {
				return lq, s.fail(http.StatusBadRequest, "InvalidQueryParameterValue", "")
			}
			lq.metadata = lq.metadata || item == "metadata"
		}
	}
	if lq.marker != "" {
		after, ok := decodeMarker(lq.marker)
		if !ok {
			return lq, s.fail(http.StatusBadRequest, "InvalidQueryParameterValue", "the marker is not one the emulator handed out")
		}
		lq.after = after
	}
	return lq, nil
}

// listBlobs answers List Blobs. The caller holds s.mu; now is the server's
// time of the request.
func (s *Server) listBlobs(req *request, now time.Time) *result {
	lq, res := s.parseListQuery(req.query.all)
	if res != nil {
		return res
	}
	c, ok := s.containers[req.Container]
	if !ok {
		return s.fail(http.StatusNotFound, "ContainerNotFound", "")
	}
	names := make([]string, 0, len(c.blobs))
	for name := range c.blobs {
		if strings.HasPrefix(name, lq.prefix) && name >= lq.after {
			names = append(names, name)
		}
	}
	sort.Strings(names) // byte order: the order of the names' UTF-8 bytes
	next := ""
	if len(names) > lq.max {
		next = encodeMarker(names[lq.max])
		names = names[:lq.max]
	}

	var b strings.Builder
	b.WriteString(xml.Header)
	b.WriteString(`<EnumerationResults ServiceEndpoint="`)
	escape(&b, req.endpoint(s.account))
	b.WriteString(`" ContainerName="`)
	escape(&b, req.Container)
	b.WriteString(`">`)
	if _, ok := req.query.all["prefix"]; ok {
		element(&b, "Prefix", lq.prefix)
	}
	if _, ok := req.query.all["marker"]; ok {
		element(&b, "Marker", lq.marker)
	}
	if lq.maxGiven != "" {
		element(&b, "MaxResults", lq.maxGiven)
	}
	b.WriteString("<Blobs>")
	for _, name := range names {
		s.writeBlobItem(&b, name, c.blobs[name], lq.metadata, now)
	}
	b.WriteString("</Blobs>")
	if next == "" {
		b.WriteString("<NextMarker />")
	} else {
		element(&b, "NextMarker", next)
	}
	b.WriteString("</EnumerationResults>")

	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	return &result{status: http.StatusOK, header: h, body: []byte(b.String()), applied: true}
}

// writeBlobItem writes one <Blob> element: the properties Get Blob
// Properties reports, with the lease state in effect at now.
func (s *Server) writeBlobItem(b *strings.Builder, name string, bs *blobState, metadata bool, now time.Time) {
	b.WriteString("<Blob>")
	if xmlSafe(name) {
		element(b, "Name", name)
	} else {
		// A name that XML cannot carry (control characters, invalid
		// UTF-8) is sent percent-encoded, as Azure does; azblob decodes
		// it with url.QueryUnescape.
		b.WriteString(`<Name Encoded="true">`)
		escape(b, url.QueryEscape(name))
		b.WriteString("</Name>")
	}
	b.WriteString("<Properties>")
	element(b, "Creation-Time", bs.created.UTC().Format(http.TimeFormat))
	element(b, "Last-Modified", bs.lastModified.UTC().Format(http.TimeFormat))
	// Azure lists ETags without the quotes its headers carry.
	element(b, "Etag", strings.Trim(bs.etag, `"`))
	element(b, "Content-Length", strconv.Itoa(len(bs.content)))
	element(b, "Content-Type", bs.contentType)
	element(b, "BlobType", bs.blobType)
	lp := leasePropsAt(bs.lease, now)
	element(b, "LeaseStatus", lp.status)
	element(b, "LeaseState", lp.state)
	if lp.duration != "" {
		element(b, "LeaseDuration", lp.duration)
	}
	element(b, "ServerEncrypted", "true")
	b.WriteString("</Properties>")
	if metadata {
		b.WriteString("<Metadata>")
		// Names are C# identifiers (parseMetadata), valid XML names. A
		// value with bytes that are not UTF-8 lists with U+FFFD in their
		// place: XML cannot carry them.
		for _, k := range sortedKeys(bs.metadata) {
			element(b, k, bs.metadata[k])
		}
		b.WriteString("</Metadata>")
	}
	b.WriteString("</Blob>")
}

// endpoint is the service endpoint List Blobs reports: the account's URL as
// the request reached it.
func (r *request) endpoint(account string) string {
	host := r.host
	if host == "" {
		host = strings.TrimSuffix(strings.TrimPrefix(localHost, "http://"), "/")
	}
	return r.scheme + "://" + host + "/" + account + "/"
}

// element writes <name>text</name>, the text escaped.
func element(b *strings.Builder, name, text string) {
	b.WriteString("<" + name + ">")
	escape(b, text)
	b.WriteString("</" + name + ">")
}

// escape writes s with XML's special characters escaped; quotes too, so it
// serves for attribute values.
func escape(b *strings.Builder, s string) {
	_ = xml.EscapeText(b, []byte(s))
}

// xmlSafe reports whether XML 1.0 can carry s as text: valid UTF-8 with only
// the characters XML allows (no control characters but tab, newline and
// carriage return; no U+FFFE or U+FFFF).
func xmlSafe(s string) bool {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false
			}
		case r == '\t', r == '\n', r == '\r':
		case r < 0x20, r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
			return false
		}
	}
	return true
}
