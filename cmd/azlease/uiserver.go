// uiserver.go: the HTTP side of 'azlease ui': the embedded page, the JSON
// under /api/, and the one listing per --refresh that every reader shares.

package main

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// uiAssets is the page: plain HTML, CSS and JavaScript, no build step.
//
//go:embed ui
var uiAssets embed.FS

// uiListTimeout bounds one listing, every page of it (InspectPrefix retries
// each page's transient failures for 6 s).
const uiListTimeout = 15 * time.Second

// uiRead is one listing and what it made.
type uiRead struct {
	at    time.Time // when it was sent
	took  time.Duration
	blobs int
	model *uiModel // nil when err is set
	err   error
}

// uiServer serves the page and the JSON. Listings happen on demand: a
// reader that finds the latest listing younger than refresh gets it; else
// it lists (one listing at a time; the others wait for it and share it).
type uiServer struct {
	g            *globals
	base         context.Context // ends when the command stops: listings end with it
	list         func(ctx context.Context) ([]azlease.Status, error)
	refresh      time.Duration
	loopbackOnly bool
	env          uiEnvelope // the fixed part of every answer
	srv          *http.Server

	sem chan struct{} // one listing at a time

	mu           sync.Mutex
	last         *uiRead
	lastSuccess  time.Time
	failingSince time.Time
}

func newUIServer(ctx context.Context, g *globals, cc *container.Client, prefix string, refresh time.Duration, loopbackOnly bool) *uiServer {
	s := &uiServer{
		g: g, base: ctx, refresh: refresh, loopbackOnly: loopbackOnly, sem: make(chan struct{}, 1),
		list: func(ctx context.Context) ([]azlease.Status, error) { return azlease.InspectPrefix(ctx, cc, prefix) },
		env: uiEnvelope{
			Account: accountOf(cc.URL()), Container: containerOf(cc), Prefix: prefix, RefreshSeconds: refresh.Seconds(),
		},
	}
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiAssets, "ui")
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /items/", s.page)
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/overview", s.overview)
	mux.HandleFunc("GET /api/blobs", s.blobsList)
	mux.HandleFunc("GET /api/items/{kind}/{name...}", s.item)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		uiError(w, http.StatusNotFound, "no such API: /api/overview, /api/items/KIND/NAME and /api/blobs answer GET")
	})
	s.srv = &http.Server{Handler: s.guard(mux), ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	return s
}

// close stops serving, within a second.
func (s *uiServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
}

// guard answers only reads, and on a loopback address only requests
// addressed to loopback (a page elsewhere cannot reach it through DNS
// rebinding); every answer forbids framing and outside content.
func (s *uiServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			uiError(w, http.StatusMethodNotAllowed, "read-only: only GET and HEAD")
			return
		}
		if s.loopbackOnly && !loopbackHost(r.Host) {
			uiError(w, http.StatusMisdirectedRequest, "this azlease ui answers requests to localhost or a loopback address only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine: localhost
// or a loopback IP, with any port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *uiServer) page(w http.ResponseWriter, r *http.Request) {
	b, err := uiAssets.ReadFile("ui/index.html")
	if err != nil {
		uiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// read returns a listing younger than refresh, listing if there is none.
func (s *uiServer) read(ctx context.Context) (*uiRead, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.sem }()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last != nil && time.Since(last.at) < s.refresh {
		return last, nil
	}
	// The listing belongs to the server, not to the reader that started
	// it: the others waiting share it even if that reader goes away.
	lctx, cancel := context.WithTimeout(s.base, uiListTimeout)
	defer cancel()
	start := time.Now()
	listed, err := s.list(lctx)
	rd := &uiRead{at: start, took: time.Since(start), blobs: len(listed), err: err}
	if err == nil {
		rd.model = buildUIModel(listed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		if !s.failingSince.IsZero() {
			s.g.log.Warn("ui: listing the container again", "failed_for", time.Since(s.failingSince).Round(time.Millisecond))
		}
		s.lastSuccess, s.failingSince = start, time.Time{}
	case s.failingSince.IsZero():
		s.failingSince = start
		s.g.log.Warn("ui: cannot list the container; the page shows why until it can", slog.String("error", line(err)))
	}
	s.last = rd
	return rd, nil
}

// envelope is the fixed part of an answer, with rd's read and storage
// state. ok is false when the listing failed.
func (s *uiServer) envelope(rd *uiRead) (uiEnvelope, bool) {
	e := s.env
	e.ReadAt, e.TookMS, e.Blobs = uiTime(rd.at), rd.took.Milliseconds(), rd.blobs
	e.Requests = max(1, (rd.blobs+azleaseListPage-1)/azleaseListPage)
	s.mu.Lock()
	e.Storage.LastSuccess, e.Storage.FailingSince = uiTime(s.lastSuccess), uiTime(s.failingSince)
	s.mu.Unlock()
	if rd.err == nil {
		e.Storage.OK = true
		return e, true
	}
	e.Storage.Problem = "unreachable"
	ee := classify("listing the container", rd.err)
	if ee.code == exitRefused || ee.code == exitUsage {
		e.Storage.Problem = "refused"
	}
	e.Storage.Error = redact(ee.msg)
	e.Blobs = 0
	return e, false
}

// azleaseListPage is how many blobs one List Blobs request lists.
const azleaseListPage = 5000

func (s *uiServer) overview(w http.ResponseWriter, r *http.Request) {
	rd, err := s.read(r.Context())
	if err != nil {
		return // the reader went away
	}
	env, ok := s.envelope(rd)
	out := uiOverview{uiEnvelope: env, Items: []uiItem{}}
	if !ok {
		uiJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	for _, it := range rd.model.items {
		out.Items = append(out.Items, it.light())
	}
	uiJSON(w, http.StatusOK, out)
}

func (s *uiServer) blobsList(w http.ResponseWriter, r *http.Request) {
	rd, err := s.read(r.Context())
	if err != nil {
		return
	}
	env, ok := s.envelope(rd)
	out := uiBlobsAnswer{uiEnvelope: env, BlobList: []uiBlob{}}
	if !ok {
		uiJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	out.BlobList = append(out.BlobList, rd.model.blobs...)
	uiJSON(w, http.StatusOK, out)
}

func (s *uiServer) item(w http.ResponseWriter, r *http.Request) {
	rd, err := s.read(r.Context())
	if err != nil {
		return
	}
	env, ok := s.envelope(rd)
	out := uiItemAnswer{uiEnvelope: env}
	if !ok {
		uiJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	i, found := rd.model.byPath[itemPath(r.PathValue("kind"), r.PathValue("name"))]
	if key, ok := strings.CutPrefix(r.PathValue("name"), "once/"); !found && ok && r.PathValue("kind") == kindOnce {
		i, found = rd.model.byPath[itemPath(kindOnce, key)] // the path of earlier versions, by the blob's name
	}
	if !found {
		uiJSON(w, http.StatusNotFound, out) // no item: not there (now), or another kind
		return
	}
	it := rd.model.items[i]
	out.Item = &it
	uiJSON(w, http.StatusOK, out)
}

func uiJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	_ = enc.Encode(v)
}

func uiError(w http.ResponseWriter, code int, msg string) {
	uiJSON(w, code, map[string]string{"error": msg})
}

// accountOf is the Blob service a container URL is on, for display: scheme,
// host and, for an emulator's path-style URL, the account; never the query
// (a SAS) or user information.
func accountOf(containerURL string) string {
	u, err := url.Parse(containerURL)
	if err != nil {
		return ""
	}
	path := strings.Trim(u.EscapedPath(), "/")
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		path = "/" + path[:i] // path-style: /ACCOUNT/CONTAINER
	} else {
		path = ""
	}
	return u.Scheme + "://" + u.Host + path
}

// redact removes what could be a secret from an error's text, should one
// ever carry it: a SAS signature, an account key.
func redact(s string) string {
	for _, key := range []string{"sig=", "AccountKey=", "SharedAccessSignature="} {
		for from := 0; ; {
			i := strings.Index(strings.ToLower(s[from:]), strings.ToLower(key))
			if i < 0 {
				break
			}
			i += from + len(key)
			j := i
			for j < len(s) && !strings.ContainsRune("&; \"'", rune(s[j])) {
				j++
			}
			s = s[:i] + "REDACTED" + s[j:]
			from = i + len("REDACTED")
		}
	}
	return s
}
