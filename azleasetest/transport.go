package azleasetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// localHost is where in-process clients send their requests. Nothing
// listens there: [Server.Transport] never dials. It is a loopback address so
// that a client that escapes the in-process transport cannot reach anything
// else.
const localHost = "http://127.0.0.1:10000/"

type clientKey struct{}

func clientFrom(ctx context.Context) string {
	s, _ := ctx.Value(clientKey{}).(string)
	return s
}

// ErrConnectionLost is what an in-process client sees when the server drops
// the connection: a [Refuse] partition, [Server.LoseResponses], the [Drop]
// and [ApplyThenDrop] faults. (A client that gives up on a hanging request
// sees its own context's error.)
var ErrConnectionLost = errors.New("azleasetest: connection lost before a response arrived")

// Transport returns an azcore transporter that serves requests in process,
// with no sockets, attributed to client as [Server.Client]'s are: for
// building other azblob clients (service, blob, lease) with
// azcore.ClientOptions.Transport. Requests and responses are converted as
// the wire would convert them: header names are canonicalised, bodies are
// copied. Any host name in a request's URL reaches this server.
func (s *Server) Transport(client string) policy.Transporter {
	return &transport{s: s, client: client}
}

type transport struct {
	s      *Server
	client string
}

func (t *transport) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	// A clone of req without its header, which canonical copies instead
	// (cloning it first would copy it twice).
	bare := *req
	bare.Header = nil
	in := bare.Clone(context.WithValue(ctx, clientKey{}, t.client))
	in.Header = canonical(req.Header)
	in.Body = io.NopCloser(bytes.NewReader(body))
	in.ContentLength = int64(len(body))
	in.RequestURI = req.URL.RequestURI()

	rec := newRecorder()
	if aborted := serveRecovering(t.s, rec, in); aborted {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrConnectionLost)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the client gave up while the server was working
	}
	res := rec.result()
	res.Request = req
	return res, nil
}

// canonical returns a copy of h with canonical header names, as the wire
// delivers them. Names that differ only in case are merged, their values
// appended in the map's order.
func canonical(h http.Header) http.Header {
	out := make(http.Header, len(h))
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	values := make([]string, n) // one backing array for all, as Header.Clone does
	for k, vs := range h {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if prev, ok := out[ck]; ok {
			out[ck] = append(prev[:len(prev):len(prev)], vs...)
			continue
		}
		m := copy(values, vs)
		out[ck] = values[:m:m]
		values = values[m:]
	}
	return out
}

// recorder is the http.ResponseWriter the in-process transport serves
// into: httptest.ResponseRecorder's behaviour (the header snapshot taken at
// WriteHeader, the implicit 200 and Content-Type sniffing of a Write that
// comes first, the body kept even where the status allows none) without
// its second copy of the header, since the snapshot it takes is already the
// canonical one the wire delivers.
type recorder struct {
	header      http.Header
	snap        http.Header // canonical(header) at WriteHeader
	length      string      // header's Content-Length at WriteHeader
	code        int
	wroteHeader bool
	body        bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: make(http.Header), code: http.StatusOK} }

func (rw *recorder) Header() http.Header { return rw.header }

func (rw *recorder) WriteHeader(code int) {
	if rw.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	rw.code = code
	rw.wroteHeader = true
	rw.snap = canonical(rw.header)
	rw.length = rw.header.Get("Content-Length")
}

func (rw *recorder) Write(buf []byte) (int, error) {
	if !rw.wroteHeader {
		_, hasType := rw.header["Content-Type"]
		if !hasType && rw.header.Get("Transfer-Encoding") == "" {
			rw.header.Set("Content-Type", http.DetectContentType(buf))
		}
		rw.WriteHeader(http.StatusOK)
	}
	rw.body.Write(buf)
	switch {
	case rw.code >= 100 && rw.code <= 199, rw.code == http.StatusNoContent, rw.code == http.StatusNotModified:
		return 0, http.ErrBodyNotAllowed
	}
	return len(buf), nil
}

// result is the response as the client receives it. The emulator sends no
// trailers.
func (rw *recorder) result() *http.Response {
	if !rw.wroteHeader {
		rw.snap = canonical(rw.header)
		rw.length = rw.header.Get("Content-Length")
	}
	res := &http.Response{
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		StatusCode:    rw.code,
		Status:        strconv.Itoa(rw.code) + " " + http.StatusText(rw.code),
		Header:        rw.snap,
		Body:          io.NopCloser(bytes.NewReader(rw.body.Bytes())),
		ContentLength: -1,
	}
	if cl := textproto.TrimString(rw.length); cl != "" {
		if n, err := strconv.ParseUint(cl, 10, 63); err == nil {
			res.ContentLength = int64(n)
		}
	}
	return res
}

// serveRecovering runs the handler and reports whether it aborted the
// connection on purpose.
func serveRecovering(h http.Handler, w http.ResponseWriter, r *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
				panic(v)
			}
			aborted = true
		}
	}()
	h.ServeHTTP(w, r)
	return false
}

// ContainerClient returns an azblob client for the named container, which
// need not exist, that talks to s in process; its requests are attributed
// to client as [Server.Client]'s are. The client signs its requests with
// [AccountKey] and keeps azblob's default retry policy (azlease sets retries
// per call).
func (s *Server) ContainerClient(name, client string) (*container.Client, error) {
	if !s.usable() {
		return nil, errNotCreated
	}
	cred, err := container.NewSharedKeyCredential(s.account, AccountKey)
	if err != nil {
		return nil, err
	}
	u := localHost + s.account + "/" + name
	return container.NewClientWithSharedKeyCredential(u, cred, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: s.Transport(client)},
	})
}

// Endpoint is a [Server] listening on a loopback address ([Server.Listen]).
type Endpoint struct {
	// URL is the Blob service URL, including the account: use it as the
	// BlobEndpoint of a connection string.
	URL     string
	account string
	srv     *http.Server
	ln      net.Listener
	err     chan error
}

// Listen serves s over HTTP on addr, which must be a loopback address
// ("127.0.0.1:0" picks a free port), in a goroutine the endpoint's Close
// waits for. Close the endpoint to stop serving.
func (s *Server) Listen(addr string) (*Endpoint, error) {
	if !s.usable() {
		return nil, errNotCreated
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("azleasetest: %q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	e := &Endpoint{
		URL:     "http://" + ln.Addr().String() + "/" + s.account,
		account: s.account,
		srv:     &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second},
		ln:      ln,
		err:     make(chan error, 1),
	}
	go func() { e.err <- e.srv.Serve(ln) }()
	return e, nil
}

// ConnectionString returns an Azure Storage connection string for the
// endpoint, with the account and key the server checks: what processes
// under test take as AZURE_STORAGE_CONNECTION_STRING, for instance.
func (e *Endpoint) ConnectionString() string {
	if e == nil || e.srv == nil {
		return "" // not returned by Listen
	}
	return "DefaultEndpointsProtocol=http;AccountName=" + e.account + ";AccountKey=" + AccountKey +
		";BlobEndpoint=" + e.URL + ";"
}

// Close stops the listener, closes open connections and waits for the
// serving goroutine to end. An Endpoint not returned by Listen has nothing
// to close: nil.
func (e *Endpoint) Close() error {
	if e == nil || e.srv == nil {
		return nil
	}
	err := e.srv.Close()
	if serr := <-e.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
