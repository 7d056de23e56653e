package azleasetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
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
	key, _ := base64.StdEncoding.DecodeString(AccountKey)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(stringToSign(r, account)))
	return hmac.Equal(h.Sum(nil), got)
}

// stringToSign is the Shared Key string-to-sign of the Blob service (version
// 2015-02-21 and later): the verb, twelve standard headers, the canonicalized
// x-ms- headers and the canonicalized resource.
func stringToSign(r *http.Request, account string) string {
	h := r.Header
	contentLength := h.Get("Content-Length")
	if contentLength == "" && r.ContentLength > 0 {
		contentLength = strconv.FormatInt(r.ContentLength, 10)
	}
	if contentLength == "0" {
		contentLength = ""
	}
	date := h.Get("Date")
	if h.Get("x-ms-date") != "" {
		date = "" // x-ms-date is signed among the canonicalized headers instead
	}
	return strings.Join([]string{
		r.Method,
		h.Get("Content-Encoding"),
		h.Get("Content-Language"),
		contentLength,
		h.Get("Content-MD5"),
		h.Get("Content-Type"),
		date,
		h.Get("If-Modified-Since"),
		h.Get("If-Match"),
		h.Get("If-None-Match"),
		h.Get("If-Unmodified-Since"),
		h.Get("Range"),
		canonicalizedHeaders(h),
		canonicalizedResource(r.URL, account),
	}, "\n")
}

// canonicalizedHeaders lists the x-ms- headers as "name:value" lines, names
// in lower case, in the order the service sorts them (see headerLess).
func canonicalizedHeaders(h http.Header) string {
	values := map[string][]string{}
	for k, vs := range h {
		name := strings.ToLower(strings.TrimSpace(k))
		if strings.HasPrefix(name, "x-ms-") {
			values[name] = append(values[name], vs...)
		}
	}
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return headerLess(names[i], names[j]) })
	lines := make([]string, len(names))
	for i, n := range names {
		vs := make([]string, len(values[n]))
		for j, v := range values[n] {
			vs[j] = strings.TrimSpace(v)
		}
		lines[i] = n + ":" + strings.Join(vs, ",")
	}
	return strings.Join(lines, "\n")
}

// canonicalizedResource is "/account/path" with the path exactly as encoded
// in the URI, then one "\nname:value1,value2" line per query parameter,
// names in lower case and sorted, values sorted.
func canonicalizedResource(u *url.URL, account string) string {
	var b strings.Builder
	b.WriteString("/" + account)
	if p := u.EscapedPath(); p != "" {
		b.WriteString(p)
	} else {
		b.WriteString("/")
	}
	q, _ := url.ParseQuery(u.RawQuery)
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vs := append([]string(nil), q[n]...)
		sort.Strings(vs)
		b.WriteString("\n" + strings.ToLower(n) + ":" + strings.Join(vs, ","))
	}
	return b.String()
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
