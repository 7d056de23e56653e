package azleasetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Authentication, as the Blob service does it for Shared Key: the client
// signs a canonical form of the request with the account key (HMAC-SHA256),
// and the server recomputes the signature and compares. A request signed for
// another account, or with another key, is refused with 403
// AuthenticationFailed, so a wrong key in a configuration fails against the
// emulator as it would against Azure.
//
// Requests that carry a SAS token (a sig query parameter) are accepted
// without checking the token: the emulator does not verify SAS signatures.
// Microsoft Entra ID bearer tokens are refused (Azure accepts them only over
// HTTPS, which the emulator does not serve). Requests with no authentication
// at all are refused with 401 NoAuthenticationInformation. The request date
// is not checked, so tests may run the server's clock at any rate.
//
// Options.AllowAnyKey turns all of this off.

// authMessages are Azure's texts for authentication failures.
const (
	msgAuthFailed = "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
	msgNoAuth     = "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
)

// authenticate checks the request's credentials. It returns nil when the
// request may proceed, or the refusal to send.
func (s *Server) authenticate(r *http.Request) *result {
	if s.anyKey {
		return nil
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		if r.URL.Query().Get("sig") != "" {
			return nil // SAS: not verified
		}
		res := s.fail(http.StatusUnauthorized, "NoAuthenticationInformation", msgNoAuth)
		res.header.Set("WWW-Authenticate", `Bearer authorization_uri=https://login.microsoftonline.com/common/oauth2/authorize resource_id=https://storage.azure.com`)
		return s.stampAuthFailure(r, res)
	}
	scheme, cred, _ := strings.Cut(auth, " ")
	if scheme != "SharedKey" {
		return s.stampAuthFailure(r, s.fail(http.StatusForbidden, "AuthenticationFailed", msgAuthFailed))
	}
	account, sig, ok := strings.Cut(strings.TrimSpace(cred), ":")
	if !ok || account != s.account || !validSignature(r, s.account, sig) {
		return s.stampAuthFailure(r, s.fail(http.StatusForbidden, "AuthenticationFailed", msgAuthFailed))
	}
	return nil
}

// stampAuthFailure adds the headers every answer carries to a refusal made
// before the request reached the handler.
func (s *Server) stampAuthFailure(r *http.Request, res *result) *result {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	res.header.Set("x-ms-request-id", "00000000-0000-4000-8000-"+pad12(seq))
	res.header.Set("x-ms-version", serviceVersion)
	if id := r.Header.Get("x-ms-client-request-id"); id != "" {
		res.header.Set("x-ms-client-request-id", id)
	}
	return res
}

func pad12(n uint64) string {
	h := strconv.FormatUint(n, 16)
	if len(h) < 12 {
		h = strings.Repeat("0", 12-len(h)) + h
	}
	return h
}

// validSignature recomputes the Shared Key signature of r with the
// emulator's key and compares it with sig in constant time.
func validSignature(r *http.Request, account, sig string) bool {
	got, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	h := signers.Get().(hash.Hash)
	defer signers.Put(h)
	h.Reset()
	h.Write([]byte(stringToSign(r, account)))
	return hmac.Equal(h.Sum(nil), got)
}

// signers holds HMAC-SHA256 hashes keyed with AccountKey, reset before each
// use: keying one costs more than the hashing a request needs.
var signers = sync.Pool{New: func() any {
	key, _ := base64.StdEncoding.DecodeString(AccountKey)
	return hmac.New(sha256.New, key)
}}

// signedHeaders are the standard headers of the string-to-sign, in its
// order, as canonical names (the request's names are canonical, so indexing
// with these finds what Header.Get finds).
var signedHeaders = func() [11]string {
	names := [...]string{"Content-Encoding", "Content-Language", "Content-Length", "Content-MD5", "Content-Type",
		"Date", "If-Modified-Since", "If-Match", "If-None-Match", "If-Unmodified-Since", "Range"}
	for i, n := range names {
		names[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return names
}()

// stringToSign is the Shared Key string-to-sign of the Blob service (version
// 2015-02-21 and later): the verb, twelve standard headers, the canonicalized
// x-ms- headers and the canonicalized resource.
func stringToSign(r *http.Request, account string) string {
	h := r.Header
	get := func(i int) string {
		if vs := h[signedHeaders[i]]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	var b strings.Builder
	b.Grow(512)
	b.WriteString(r.Method)
	for i := range signedHeaders {
		v := get(i)
		switch signedHeaders[i] {
		case "Content-Length":
			if v == "" && r.ContentLength > 0 {
				v = strconv.FormatInt(r.ContentLength, 10)
			}
			if v == "0" {
				v = ""
			}
		case "Date":
			if h.Get("x-ms-date") != "" {
				v = "" // x-ms-date is signed among the canonicalized headers instead
			}
		}
		b.WriteByte('\n')
		b.WriteString(v)
	}
	b.WriteByte('\n')
	writeCanonicalizedHeaders(&b, h)
	b.WriteByte('\n')
	writeCanonicalizedResource(&b, r.URL, account)
	return b.String()
}

// msHeader is one x-ms- header of the string-to-sign: its name in lower
// case, and the values of every header of that name.
type msHeader struct {
	name   string
	values []string
}

type msHeaders []msHeader

func (m msHeaders) Len() int           { return len(m) }
func (m msHeaders) Less(i, j int) bool { return headerLess(m[i].name, m[j].name) }
func (m msHeaders) Swap(i, j int)      { m[i], m[j] = m[j], m[i] }

// writeCanonicalizedHeaders writes the x-ms- headers as "name:value" lines,
// names in lower case, in the order the service sorts them (see
// headerLess), values trimmed and joined with commas.
func writeCanonicalizedHeaders(b *strings.Builder, h http.Header) {
	var found msHeaders
	for k, vs := range h {
		k = strings.TrimSpace(k)
		if !hasMSPrefix(k) {
			continue
		}
		name := strings.ToLower(k)
		i := 0
		for i < len(found) && found[i].name != name {
			i++
		}
		if i == len(found) {
			found = append(found, msHeader{name: name})
		}
		found[i].values = append(found[i].values, vs...)
	}
	sort.Sort(found)
	for i, f := range found {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.name)
		b.WriteByte(':')
		for j, v := range f.values {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.TrimSpace(v))
		}
	}
}

// hasMSPrefix reports whether strings.ToLower(k) starts with "x-ms-": no
// rune outside ASCII lowers to one of its bytes, so comparing the first
// five bytes without case is the same test.
func hasMSPrefix(k string) bool {
	const p = "x-ms-"
	if len(k) < len(p) {
		return false
	}
	for i := range len(p) {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != p[i] {
			return false
		}
	}
	return true
}

// writeCanonicalizedResource writes "/account/path" with the path exactly
// as encoded in the URI, then one "\nname:value1,value2" line per query
// parameter, names in lower case and sorted, values sorted.
func writeCanonicalizedResource(b *strings.Builder, u *url.URL, account string) {
	b.WriteByte('/')
	b.WriteString(account)
	if p := u.EscapedPath(); p != "" {
		b.WriteString(p)
	} else {
		b.WriteByte('/')
	}
	if u.RawQuery == "" {
		return
	}
	q, _ := url.ParseQuery(u.RawQuery)
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := q[n] // ParseQuery's own copy: sorting it changes nothing else
		sort.Strings(vs)
		b.WriteByte('\n')
		b.WriteString(strings.ToLower(n))
		b.WriteByte(':')
		for j, v := range vs {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v)
		}
	}
}

// headerLess orders header names as the service does, and the Azure SDKs
// with it: a culture-insensitive comparison in two levels. At the first,
// hyphens and apostrophes are ignored and letters compare without regard to
// case; the second breaks ties on the hyphens and apostrophes. For names
// that differ in letters or digits this is the ordinary order; "x-ms-a-b"
// and "x-ms-ab" are where it is not. This is a transcription of the SDK's
// comparison, so that both sides build the same string.
func headerLess(a, b string) bool {
	weights := [2]func(byte) int{primaryWeight, secondaryWeight}
	level, i, j := 0, 0, 0
	for level < len(weights) {
		if level == len(weights)-1 && i != j {
			return i > j
		}
		w1, w2 := 1, 1 // past the end
		if i < len(a) {
			w1 = weights[level](a[i])
		}
		if j < len(b) {
			w2 = weights[level](b[j])
		}
		switch {
		case w1 == 1 && w2 == 1:
			level, i, j = level+1, 0, 0
		case w1 == w2:
			i, j = i+1, j+1
		case w1 == 0:
			i++
		case w2 == 0:
			j++
		default:
			return w1 < w2
		}
	}
	return false
}

// primaryWeight is the first-level weight of a byte: punctuation before
// digits before letters, letters without case, hyphen and apostrophe
// ignored (weight 0).
func primaryWeight(c byte) int {
	if int(c) < len(primaryWeights) {
		return primaryWeights[c]
	}
	return 0x1000 + int(c) // beyond the table (not valid in a header name): last, by byte
}

// secondaryWeight breaks ties on the hyphens and apostrophes the first level
// ignored.
func secondaryWeight(c byte) int {
	switch c {
	case '\'':
		return 0x8012
	case '-':
		return 0x8212
	}
	return 0
}

// primaryWeights is the service's first-level table, for bytes up to 0x7f.
var primaryWeights = [...]int{
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x71c, 0x0, 0x71f, 0x721, 0x723, 0x725,
	0x0, 0x0, 0x0, 0x72d, 0x803, 0x0, 0x0, 0x733, 0x0, 0xd03, 0xd1a, 0xd1c, 0xd1e,
	0xd20, 0xd22, 0xd24, 0xd26, 0xd28, 0xd2a, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25, 0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51,
	0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99, 0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9,
	0x0, 0x0, 0x0, 0x743, 0x744, 0x748, 0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25,
	0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51, 0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99,
	0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9, 0x0, 0x74c, 0x0, 0x750, 0x0,
}
