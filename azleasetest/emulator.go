package azleasetest

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azlease/azlease/internal/azname"
)

// Account and AccountKey are the defaults of [Options]: Azurite's well-known
// development account, so connection strings written for Azurite work here too.
const (
	Account    = "devstoreaccount1"
	AccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// serviceVersion is echoed in x-ms-version on every response.
const serviceVersion = "2026-12-06"

// Options configures a [Server]. A nil *Options means the defaults.
type Options struct {
	// Account is the storage account name the server answers for, the first
	// path segment of every URL. Default: [Account].
	Account string

	// AllowAnyKey turns off the Shared Key check: requests signed with any
	// key, for any account, or not at all, are served. Zero (false) means a
	// request must be signed for Account with [AccountKey], or carry a SAS
	// (not verified); others are refused as Azure refuses them, with 403
	// AuthenticationFailed (or 401 NoAuthenticationInformation).
	AllowAnyKey bool

	// Seed seeds the random source that decides which requests the shares
	// of [Server.FailRequests], [Server.LoseResponses] and
	// [Server.ApplyLate] pick. Zero is a seed like any other: every server
	// draws the same sequence unless told otherwise. (Which request meets
	// which draw still depends on the order in which concurrent requests
	// arrive.)
	Seed uint64
}

// Server emulates the Blob service of one storage account. It is an
// [http.Handler], and safe for concurrent use. Make it with [New] or
// [NewServer]: a zero or nil Server serves nothing (every request gets 500),
// its fault and clock settings do nothing, its reads return zero values,
// and its methods that can fail return an error.
type Server struct {
	account string
	anyKey  bool       // Options.AllowAnyKey
	tb      testing.TB // NewServer's; nil from New

	mu         sync.Mutex
	containers map[string]*containerState
	grants     map[string][]grant // by "container/blob"; kept when the blob is deleted
	seq        uint64             // ETag and request ID source
	clock      serverClock
	past       []serverClock // earlier clock segments, oldest first, for converting past instants
	localNow   time.Time     // local time of the request being handled, for the grant log
	client     string        // client of the request being handled, for the grant log
	dateSec    time.Time     // the second dateText shows (Server.date)
	dateText   string
	faults     FaultFunc
	rules      namedFaults
	closed     chan struct{}
	closeOnce  sync.Once
	late       sync.WaitGroup // requests waiting to be applied late (ApplyLate)
}

type containerState struct {
	blobs        map[string]*blobState
	etag         string
	lastModified time.Time
}

type blobState struct {
	blobType     string // blockBlob or appendBlob (appendblob.go)
	blocks       int    // an append blob's committed blocks
	content      []byte
	contentType  string
	metadata     map[string]string // names as sent; looked up case-insensitively
	etag         string
	lastModified time.Time
	created      time.Time
	lease        leaseRecord
	key          string // "container/blob", the key of its grants
}

// errNotCreated is what a Server not made by New or NewServer returns.
var errNotCreated = errors.New("azleasetest: Server not created with New or NewServer")

// usable reports whether s was made by New or NewServer.
func (s *Server) usable() bool { return s != nil && s.containers != nil }

// New returns an empty server that is not tied to a test: for a server on a
// loopback port ([Server.Listen]) in a program, such as the `azlease
// emulator` command. Close it when done. In tests, use [NewServer]. Its
// clock runs at the same rate as the local clock until [Server.SetClockRate]
// says otherwise.
func New(opts *Options) *Server {
	account := Account
	if opts != nil && opts.Account != "" {
		account = opts.Account
	}
	var seed uint64
	if opts != nil {
		seed = opts.Seed
	}
	now := time.Now()
	return &Server{
		account:    account,
		anyKey:     opts != nil && opts.AllowAnyKey,
		rules:      newNamedFaults(seed),
		containers: make(map[string]*containerState),
		grants:     make(map[string][]grant),
		clock:      serverClock{baseLocal: now, baseServer: now, rate: 1},
		closed:     make(chan struct{}),
	}
}

// Close releases every request that is hanging or delayed on purpose, so a
// server that is being shut down never holds a client forever, drops the
// requests still waiting to be applied late ([Server.ApplyLate]), and waits
// for the goroutines that held them. The server keeps answering afterwards;
// Close only ends deliberate waits. [NewServer] calls it when the test ends.
// Calling it more than once is harmless.
func (s *Server) Close() {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	s.closeOnce.Do(func() { close(s.closed) })
	s.mu.Unlock()
	s.late.Wait()
}

// serverClock maps local time to the server's time. The server's clock runs
// at rate times the speed of the local clock.
type serverClock struct {
	baseLocal  time.Time
	baseServer time.Time
	rate       float64
}

func (c serverClock) at(local time.Time) time.Time {
	return c.baseServer.Add(time.Duration(float64(local.Sub(c.baseLocal)) * c.rate))
}

// SetClockRate makes the server's clock run rate times as fast as the local
// clock from now on (1.01: 1 % fast, so a 15 s lease expires 0.15 s early by
// the clients' clocks; 0.99: late), as a client whose clock drifts from
// Azure's sees it. [Grant] times stay in local time. It panics unless
// 0.5 <= rate <= 2: anything else is a test bug.
func (s *Server) SetClockRate(rate float64) {
	if !s.usable() {
		return
	}
	if !(rate >= 0.5 && rate <= 2) {
		panic(fmt.Sprintf("azleasetest: clock rate %v outside [0.5, 2]", rate))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	local := time.Now()
	s.past = append(s.past, s.clock)
	s.clock = serverClock{baseLocal: local, baseServer: s.clock.at(local), rate: rate}
}

// serverAt returns what the server's clock read at a local instant, through
// the clock segment in force then.
func (s *Server) serverAt(local time.Time) time.Time {
	c := s.clock
	for i := len(s.past) - 1; i >= 0 && local.Before(c.baseLocal); i-- {
		c = s.past[i]
	}
	return c.at(local)
}

// localAt returns the first local instant at which the server's clock read
// server or later: when a lease that expires at server actually expired (or
// will). The float division can be off by a few nanoseconds either way; the
// loops make it exact, since serverAt never decreases.
func (s *Server) localAt(server time.Time) time.Time {
	c := s.clock
	for i := len(s.past) - 1; i >= 0 && !server.After(c.baseServer); i-- {
		c = s.past[i]
	}
	l := c.baseLocal.Add(time.Duration(float64(server.Sub(c.baseServer)) / c.rate))
	for s.serverAt(l).Before(server) {
		l = l.Add(1)
	}
	for !s.serverAt(l.Add(-1)).Before(server) {
		l = l.Add(-1)
	}
	return l
}

// Now returns the server's current time: the local time, unless
// [Server.SetClockRate] made the server's clock run at another rate.
func (s *Server) Now() time.Time {
	if !s.usable() {
		return time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock.at(time.Now())
}

// ServeHTTP answers one Blob service request. A request for another
// account, or whose Shared Key signature does not verify, is refused with
// 403 AuthenticationFailed unless [Options.AllowAnyKey] is set.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.usable() {
		http.Error(w, errNotCreated.Error(), http.StatusInternalServerError)
		return
	}
	if res := s.authenticate(r); res != nil {
		res.write(w, r)
		return
	}
	req := parseRequest(s.account, r)
	if !s.injectFault(w, r, req) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBlobSize+1))
	if err != nil {
		s.fail(http.StatusBadRequest, "InvalidInput", "could not read the request body").write(w, r)
		return
	}
	if req.fault.Action == ApplyLate {
		s.applyLate(r.Context(), req, body, req.fault.LateBy)
		panic(http.ErrAbortHandler) // the client has given up: nobody reads an answer
	}
	res := s.handle(req, body) // applied if it can be; then the answer may be lost
	if req.fault.Action == ApplyThenDrop {
		panic(http.ErrAbortHandler)
	}
	if req.fault.Action == ApplyThenHang {
		s.hang(r.Context())
		panic(http.ErrAbortHandler)
	}
	s.wait(r.Context(), req.fault.DelayResponse)
	res.write(w, r)
}

// request is a parsed Blob service request.
type request struct {
	Request
	query queryParams
	// scheme and host are where the request was sent, for List Blobs'
	// ServiceEndpoint.
	scheme, host string
	fault        Fault
}

type queryParams struct {
	restype, comp string
	all           url.Values // every parameter, decoded (List Blobs reads prefix, marker …)
}

func parseRequest(account string, r *http.Request) *request {
	path := strings.TrimPrefix(r.URL.Path, "/")
	parts := strings.SplitN(path, "/", 3)
	req := &request{Request: Request{Client: clientFrom(r.Context()), Header: r.Header}, scheme: "http", host: r.Host}
	if r.TLS != nil {
		req.scheme = "https"
	}
	q := r.URL.Query()
	req.query = queryParams{restype: q.Get("restype"), comp: q.Get("comp"), all: q}
	if len(parts) > 0 && parts[0] == account {
		if len(parts) > 1 {
			req.Container = parts[1]
		}
		if len(parts) > 2 {
			req.Blob = parts[2]
		}
	} else {
		req.Container = "\x00" // wrong account: answered by handle
	}
	req.Op = classify(r.Method, req)
	return req
}

func classify(method string, req *request) Op {
	if req.Blob == "" {
		switch {
		case req.query.restype == "container" && req.query.comp == "" && method == http.MethodPut:
			return OpCreateContainer
		case req.query.restype == "container" && req.query.comp == "" && (method == http.MethodGet || method == http.MethodHead):
			return OpGetContainerProperties
		case req.query.restype == "container" && req.query.comp == "" && method == http.MethodDelete:
			return OpDeleteContainer
		case req.query.restype == "container" && req.query.comp == "list" && method == http.MethodGet:
			return OpListBlobs
		}
		return OpUnknown
	}
	switch req.query.comp {
	case "":
		switch method {
		case http.MethodPut:
			return OpPutBlob
		case http.MethodHead:
			return OpGetProperties
		case http.MethodGet:
			return OpGetBlob
		case http.MethodDelete:
			return OpDeleteBlob
		}
	case "appendblock":
		if method == http.MethodPut {
			return OpAppendBlock
		}
	case "metadata":
		switch method {
		case http.MethodPut:
			return OpSetMetadata
		case http.MethodGet, http.MethodHead:
			return OpGetMetadata
		}
	case "lease":
		if method == http.MethodPut {
			switch strings.ToLower(req.Header.Get("x-ms-lease-action")) {
			case "acquire":
				return OpAcquireLease
			case "renew":
				return OpRenewLease
			case "change":
				return OpChangeLease
			case "release":
				return OpReleaseLease
			case "break":
				return OpBreakLease
			}
			return OpLeaseInvalid
		}
	}
	return OpUnknown
}

// result is what the server answers; applied says whether the request
// changed state or would have been answered successfully.
type result struct {
	status  int
	code    string
	message string
	header  http.Header
	body    []byte
	applied bool
}

func (res *result) write(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, vs := range res.header {
		h[k] = vs
	}
	if res.code != "" {
		h.Set("x-ms-error-code", res.code)
		if r.Method != http.MethodHead && res.status != http.StatusNotModified {
			var b bytes.Buffer
			b.WriteString(xml.Header)
			b.WriteString("<Error><Code>")
			_ = xml.EscapeText(&b, []byte(res.code))
			b.WriteString("</Code><Message>")
			_ = xml.EscapeText(&b, []byte(res.message))
			b.WriteString("</Message></Error>")
			res.body = b.Bytes()
			h.Set("Content-Type", "application/xml")
		}
	}
	if res.body != nil || r.Method == http.MethodHead {
		if h.Get("Content-Length") == "" {
			h.Set("Content-Length", strconv.Itoa(len(res.body)))
		}
	}
	w.WriteHeader(res.status)
	if r.Method != http.MethodHead && len(res.body) > 0 {
		_, _ = w.Write(res.body)
	}
}

func (s *Server) fail(status int, code, message string) *result {
	if message == "" {
		message = messages[code]
	}
	return &result{status: status, code: code, message: message, header: http.Header{}}
}

func (s *Server) handle(req *request, body []byte) *result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.localNow, s.client = time.Now(), req.Client
	now := s.clock.at(s.localNow)
	res := s.dispatch(req, body, now)
	if res.header == nil {
		res.header = http.Header{}
	}
	// What Header.Set does, with the names canonicalised once (package
	// variables) rather than on every request.
	res.header[hdrRequestID] = []string{"00000000-0000-4000-8000-" + pad12(s.seq)}
	res.header[hdrVersion] = []string{serviceVersion}
	res.header["Date"] = []string{s.date(now)}
	if id := req.Header.Get(hdrClientRequestID); id != "" {
		res.header[hdrClientRequestID] = []string{id}
	}
	return res
}

// Canonical names of the headers every answer carries.
var (
	hdrRequestID       = textproto.CanonicalMIMEHeaderKey("x-ms-request-id")
	hdrVersion         = textproto.CanonicalMIMEHeaderKey("x-ms-version")
	hdrClientRequestID = textproto.CanonicalMIMEHeaderKey("x-ms-client-request-id")
)

// date is the Date header for the server time now, formatted once per
// second (the header's precision). The caller holds s.mu.
func (s *Server) date(now time.Time) string {
	sec := now.UTC().Truncate(time.Second)
	if s.dateText == "" || !sec.Equal(s.dateSec) {
		s.dateSec, s.dateText = sec, sec.Format(http.TimeFormat)
	}
	return s.dateText
}

func (s *Server) dispatch(req *request, body []byte, now time.Time) *result {
	if req.Container == "\x00" {
		return s.fail(http.StatusBadRequest, "InvalidUri", "the account name in the URL is not "+s.account)
	}
	switch req.Op {
	case OpCreateContainer:
		return s.createContainer(req, now)
	case OpGetContainerProperties:
		return s.getContainer(req)
	case OpDeleteContainer:
		return s.deleteContainer(req)
	case OpListBlobs:
		return s.listBlobs(req, now)
	case OpUnknown, OpLeaseInvalid:
		if req.Op == OpLeaseInvalid {
			return s.fail(http.StatusBadRequest, "InvalidHeaderValue", "x-ms-lease-action must be acquire, renew, change, release or break")
		}
		return s.fail(http.StatusBadRequest, "UnsupportedQueryParameter", "the emulator does not implement this operation")
	}
	c, ok := s.containers[req.Container]
	if !ok {
		return s.fail(http.StatusNotFound, "ContainerNotFound", "")
	}
	if req.Op == OpPutBlob {
		return s.putBlob(c, req, body, now)
	}
	b, ok := c.blobs[req.Blob]
	if !ok {
		return s.fail(http.StatusNotFound, "BlobNotFound", "")
	}
	switch req.Op {
	case OpGetProperties, OpGetBlob, OpGetMetadata:
		return s.readBlob(b, req, now)
	case OpSetMetadata:
		return s.setMetadata(b, req, now)
	case OpDeleteBlob:
		return s.deleteBlob(c, b, req, now)
	case OpAppendBlock:
		return s.appendBlock(b, req, body, now)
	default:
		return s.leaseOp(b, req, now)
	}
}

func (s *Server) newETag() string {
	s.seq++
	h := strings.ToUpper(strconv.FormatUint(s.seq, 16)) // as fmt's %013X
	if len(h) < 13 {
		h = strings.Repeat("0", 13-len(h)) + h
	}
	return `"0x8DE` + h + `"`
}

func (s *Server) createContainer(req *request, now time.Time) *result {
	if azname.ContainerProblem(req.Container) != "" {
		return s.fail(http.StatusBadRequest, "InvalidResourceName", "")
	}
	if _, ok := s.containers[req.Container]; ok {
		return s.fail(http.StatusConflict, "ContainerAlreadyExists", "")
	}
	c := s.newContainer(now)
	s.containers[req.Container] = c
	return &result{status: http.StatusCreated, header: stamp(c.etag, c.lastModified), applied: true}
}

// newContainer is an empty container created at now (server time).
func (s *Server) newContainer(now time.Time) *containerState {
	return &containerState{blobs: make(map[string]*blobState), etag: s.newETag(), lastModified: now}
}

func (s *Server) getContainer(req *request) *result {
	c, ok := s.containers[req.Container]
	if !ok {
		return s.fail(http.StatusNotFound, "ContainerNotFound", "")
	}
	h := stamp(c.etag, c.lastModified)
	h.Set("x-ms-lease-state", "available")
	h.Set("x-ms-lease-status", "unlocked")
	return &result{status: http.StatusOK, header: h, applied: true}
}

func (s *Server) deleteContainer(req *request) *result {
	if _, ok := s.containers[req.Container]; !ok {
		return s.fail(http.StatusNotFound, "ContainerNotFound", "")
	}
	delete(s.containers, req.Container)
	return &result{status: http.StatusAccepted, applied: true}
}

// maxBlobSize bounds what the emulator keeps in memory for one blob.
const maxBlobSize = 4 << 20

func (s *Server) putBlob(c *containerState, req *request, body []byte, now time.Time) *result {
	if azname.BlobProblem(req.Blob) != "" {
		return s.fail(http.StatusBadRequest, "InvalidResourceName", "")
	}
	if len(body) > maxBlobSize {
		return s.fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the emulator keeps blobs up to 4 MiB")
	}
	md, res := s.parseMetadata(req.Header)
	if res != nil {
		return res
	}
	blobType, res := s.blobTypeOf(req.Header)
	if res != nil {
		return res
	}
	if blobType == appendBlob && len(body) > 0 {
		return s.fail(http.StatusBadRequest, "InvalidHeaderValue", "Put Blob creates an empty append blob: Content-Length must be 0")
	}
	b, exists := c.blobs[req.Blob]
	if exists {
		// Azure checks the lease before the conditions: creating a blob that
		// exists and is leased answers 412 LeaseIdMissing, not 409.
		if res := s.checkWriteLease(b, req, now); res != nil {
			return res
		}
		if res := s.checkConditions(req.Header, b, true); res != nil {
			if res.status == http.StatusPreconditionFailed && req.Header.Get("If-None-Match") == "*" {
				return s.fail(http.StatusConflict, "BlobAlreadyExists", "")
			}
			return res
		}
	} else {
		if res := s.checkConditions(req.Header, nil, true); res != nil {
			return res
		}
		if req.Header.Get("x-ms-lease-id") != "" {
			return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
		}
		b = &blobState{created: now, key: req.Container + "/" + req.Blob}
		c.blobs[req.Blob] = b
	}
	s.afterWrite(b, req, now)
	b.blobType, b.blocks = blobType, 0
	b.content = body
	b.contentType = req.Header.Get("x-ms-blob-content-type")
	if b.contentType == "" {
		b.contentType = "application/octet-stream"
	}
	b.metadata = md
	b.etag = s.newETag()
	b.lastModified = now
	h := stamp(b.etag, b.lastModified)
	h.Set("x-ms-request-server-encrypted", "true")
	return &result{status: http.StatusCreated, header: h, applied: true}
}

func (s *Server) setMetadata(b *blobState, req *request, now time.Time) *result {
	md, res := s.parseMetadata(req.Header)
	if res != nil {
		return res
	}
	if res := s.checkWriteLease(b, req, now); res != nil {
		return res
	}
	if res := s.checkConditions(req.Header, b, true); res != nil {
		return res
	}
	s.afterWrite(b, req, now)
	b.metadata = md
	b.etag = s.newETag()
	b.lastModified = now
	h := stamp(b.etag, b.lastModified)
	h.Set("x-ms-request-server-encrypted", "true")
	return &result{status: http.StatusOK, header: h, applied: true}
}

func (s *Server) deleteBlob(c *containerState, b *blobState, req *request, now time.Time) *result {
	if res := s.checkWriteLease(b, req, now); res != nil {
		return res
	}
	if res := s.checkConditions(req.Header, b, true); res != nil {
		return res
	}
	delete(c.blobs, req.Blob)
	return &result{status: http.StatusAccepted, header: http.Header{}, applied: true}
}

func (s *Server) readBlob(b *blobState, req *request, now time.Time) *result {
	if res := s.checkReadLease(b, req, now); res != nil {
		return res
	}
	if res := s.checkConditions(req.Header, b, false); res != nil {
		return res
	}
	h := stamp(b.etag, b.lastModified)
	for _, k := range sortedKeys(b.metadata) {
		h["x-ms-meta-"+k] = []string{b.metadata[k]}
	}
	if req.Op == OpGetMetadata {
		return &result{status: http.StatusOK, header: h, applied: true}
	}
	lp := leasePropsAt(b.lease, now)
	h.Set("x-ms-lease-state", lp.state)
	h.Set("x-ms-lease-status", lp.status)
	if lp.duration != "" {
		h.Set("x-ms-lease-duration", lp.duration)
	}
	h.Set("x-ms-blob-type", b.blobType)
	if b.blobType == appendBlob {
		h.Set("x-ms-blob-committed-block-count", strconv.Itoa(b.blocks))
	}
	h.Set("Content-Type", b.contentType)
	h.Set("Content-Length", strconv.Itoa(len(b.content)))
	h.Set("x-ms-creation-time", b.created.UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	res := &result{status: http.StatusOK, header: h, applied: true}
	if req.Op == OpGetBlob {
		if r, ranged, bad := s.rangeOf(req.Header); bad != nil {
			return bad
		} else if ranged {
			return s.serveRange(res, b.content, r)
		}
		res.body = append([]byte{}, b.content...)
		if res.body == nil {
			res.body = []byte{}
		}
	}
	return res
}

// afterWrite applies the side effect of a successful write on the lease: a
// write without a lease ID to an expired or broken lease makes the blob
// available, so the old holder can no longer renew it.
func (s *Server) afterWrite(b *blobState, req *request, now time.Time) {
	if req.Header.Get("x-ms-lease-id") != "" {
		return
	}
	switch b.lease.effective(now).state {
	case expired, broken:
		b.lease = leaseRecord{}
	}
}

// checkConditions evaluates If-Match, If-None-Match, If-Modified-Since and
// If-Unmodified-Since. b is nil when the blob does not exist.
func (s *Server) checkConditions(h http.Header, b *blobState, write bool) *result {
	failed := func() *result {
		return s.fail(http.StatusPreconditionFailed, "ConditionNotMet", "")
	}
	// Reads answer 304 Not Modified (with no body) when If-None-Match or
	// If-Modified-Since fails, and 412 for If-Match and If-Unmodified-Since.
	notModified := func() *result {
		if write {
			return failed()
		}
		return s.fail(http.StatusNotModified, "ConditionNotMet", "")
	}
	if m := h.Get("If-Match"); m != "" {
		if b == nil || (m != "*" && m != b.etag) {
			if b == nil {
				return s.fail(http.StatusNotFound, "BlobNotFound", "")
			}
			return failed()
		}
	}
	if m := h.Get("If-None-Match"); m != "" && b != nil {
		if m == "*" || m == b.etag {
			return notModified()
		}
	}
	if v := h.Get("If-Modified-Since"); v != "" && b != nil {
		if t, err := http.ParseTime(v); err == nil && !b.lastModified.Truncate(time.Second).After(t) {
			return notModified()
		}
	}
	if v := h.Get("If-Unmodified-Since"); v != "" && b != nil {
		if t, err := http.ParseTime(v); err == nil && b.lastModified.Truncate(time.Second).After(t) {
			return failed()
		}
	}
	return nil
}

// parseMetadata collects x-ms-meta-* headers and validates them the way Azure
// does: names are C# identifiers, values are header-safe, 8 KiB in all.
func (s *Server) parseMetadata(h http.Header) (map[string]string, *result) {
	md := make(map[string]string)
	size := 0
	for k, vs := range h {
		if len(k) <= len("x-ms-meta-") || !strings.EqualFold(k[:len("x-ms-meta-")], "x-ms-meta-") {
			continue
		}
		name := k[len("x-ms-meta-"):]
		if !azname.MetadataName(name) {
			return nil, s.fail(http.StatusBadRequest, "InvalidMetadata", "")
		}
		for existing := range md {
			if strings.EqualFold(existing, name) {
				return nil, s.fail(http.StatusBadRequest, "InvalidMetadata", "duplicate metadata name")
			}
		}
		v := strings.Join(vs, ",")
		md[name] = v
		size += len(name) + len(v)
	}
	if size > 8<<10 {
		return nil, s.fail(http.StatusBadRequest, "MetadataTooLarge", "")
	}
	return md, nil
}

func stamp(etag string, lastModified time.Time) http.Header {
	h := http.Header{}
	h.Set("ETag", etag)
	h.Set("Last-Modified", lastModified.UTC().Format(http.TimeFormat))
	return h
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hang blocks until the client gives up or the server is closed.
func (s *Server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.closed:
	}
}

// messages are Azure's texts for the codes the emulator answers.
var messages = map[string]string{
	"AppendPositionConditionNotMet":      "The append position condition specified was not met.",
	"BlobAlreadyExists":                  "The specified blob already exists.",
	"BlockCountExceedsLimit":             "The committed block count cannot exceed the maximum limit of 50,000 blocks.",
	"InvalidBlobType":                    "The blob type is invalid for this operation.",
	"InvalidRange":                       "The range specified is invalid for the current size of the resource.",
	"MaxBlobSizeConditionNotMet":         "The max blob size condition specified was not met.",
	"RequestBodyTooLarge":                "The request body is too large and exceeds the maximum permissible limit.",
	"BlobNotFound":                       "The specified blob does not exist.",
	"ConditionNotMet":                    "The condition specified using HTTP conditional header(s) is not met.",
	"ContainerAlreadyExists":             "The specified container already exists.",
	"ContainerNotFound":                  "The specified container does not exist.",
	"InvalidHeaderValue":                 "The value for one of the HTTP headers is not in the correct format.",
	"InvalidMetadata":                    "The metadata specified is invalid. It has characters that are not permitted.",
	"InvalidResourceName":                "The specified resource name contains invalid characters.",
	"LeaseAlreadyPresent":                "There is already a lease present.",
	"LeaseIdMismatchWithBlobOperation":   "The lease ID specified did not match the lease ID for the blob.",
	"LeaseIdMismatchWithLeaseOperation":  "The lease ID specified did not match the lease ID for the blob.",
	"LeaseIdMissing":                     "There is currently a lease on the blob and no lease ID was specified in the request.",
	"LeaseIsBreakingAndCannotBeAcquired": "The lease ID matched, but the lease is currently in breaking state and cannot be acquired until it is broken.",
	"LeaseIsBreakingAndCannotBeChanged":  "The lease ID matched, but the lease is currently in breaking state and cannot be changed.",
	"LeaseIsBrokenAndCannotBeRenewed":    "The lease ID matched, but the lease has been broken explicitly and cannot be renewed.",
	"LeaseLost":                          "A lease ID was specified, but the lease for the blob has expired.",
	"LeaseNotPresentWithBlobOperation":   "There is currently no lease on the blob.",
	"LeaseNotPresentWithLeaseOperation":  "There is currently no lease on the blob.",
	"MetadataTooLarge":                   "The size of the specified metadata exceeds the maximum size permitted.",
	"MissingRequiredHeader":              "An HTTP header that's mandatory for this request is not specified.",
	"ServerBusy":                         "The server is currently unable to receive requests. Please retry your request.",
	"InternalError":                      "The server encountered an internal error. Please retry the request.",
	"InvalidQueryParameterValue":         "Value for one of the query parameters specified in the request URI is invalid.",
	"OutOfRangeQueryParameterValue":      "One of the query parameters specified in the request URI is outside the permissible range.",
	"UnsupportedHeader":                  "One of the HTTP headers specified in the request is not supported.",
	"UnsupportedQueryParameter":          "One of the query parameters specified in the request URI is not supported.",
}
