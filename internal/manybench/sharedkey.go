package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// sharedKey signs requests with an account key (Shared Key), by hand: the
// bare net/http variant's only concession to Azure. It handles what a renew
// request carries: no body, no standard headers but x-ms- ones, and a query
// of comp=lease.
type sharedKey struct {
	account string
	pool    sync.Pool // of hash.Hash keyed with the account key
}

func newSharedKey(account, key string) (*sharedKey, error) {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return nil, err
	}
	s := &sharedKey{account: account}
	s.pool.New = func() any { return hmac.New(sha256.New, k) }
	return s, nil
}

// sign sets the Authorization header of r, which has no body and whose
// x-ms- header names (lower case) sort plainly.
func (s *sharedKey) sign(r *http.Request) {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteString(strings.Repeat("\n", 12)) // eleven empty standard headers
	names := make([]string, 0, 4)
	for k := range r.Header {
		if n := strings.ToLower(k); strings.HasPrefix(n, "x-ms-") {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	for _, k := range names {
		b.WriteString(strings.ToLower(k) + ":" + strings.TrimSpace(r.Header.Get(k)) + "\n")
	}
	b.WriteString("/" + s.account + r.URL.EscapedPath())
	q := r.URL.Query()
	qn := make([]string, 0, len(q))
	for n := range q {
		qn = append(qn, n)
	}
	sort.Strings(qn)
	for _, n := range qn {
		vs := append([]string(nil), q[n]...)
		sort.Strings(vs)
		b.WriteString("\n" + strings.ToLower(n) + ":" + strings.Join(vs, ","))
	}
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(b.String()))
	sig := base64.StdEncoding.EncodeToString(h.Sum(nil))
	s.pool.Put(h)
	r.Header.Set("Authorization", "SharedKey "+s.account+":"+sig)
}
