package main

// The etcd contender: an embedded single-node etcd (go.etcd.io/etcd/server/v3/embed)
// on free loopback ports with its data in a temporary directory, and
// concurrency.Mutex, each waiter on a client and session of its own. The
// clients' gRPC interceptors count what they send: every unary RPC and
// every message sent on a stream (a watch created, a lease kept alive). Each
// client reaches etcd through a loopback proxy of its own (proxy.go), which
// can cut it off for a while.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

type etcdBackend struct {
	e        *embed.Etcd
	dir      string
	endpoint string
	ttl      int // session TTL, seconds
	sent     atomic.Int64
	failed   atomic.Int64
}

// startEtcd starts the embedded etcd, with fsync as etcd runs by default or
// without (its UnsafeNoFsync), retrying with other ports if one it picked
// was taken meanwhile.
func startEtcd(noFsync bool) func(ctx context.Context, p params) (backend, error) {
	return func(ctx context.Context, p params) (backend, error) {
		var err error
		for range 3 {
			var b *etcdBackend
			if b, err = startEtcdOnce(ctx, p, noFsync); err == nil {
				return b, nil
			}
		}
		return nil, err
	}
}

func startEtcdOnce(ctx context.Context, p params, noFsync bool) (*etcdBackend, error) {
	dir, err := os.MkdirTemp("", "lockbench-etcd-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "lockbench"
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = noFsync
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b := &etcdBackend{e: e, dir: dir, endpoint: client.Host, ttl: max(1, int(p.etcdTTL/time.Second))}
	select {
	case <-e.Server.ReadyNotify():
		return b, nil
	case err := <-e.Err():
		b.close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		b.close()
		return nil, errors.New("embedded etcd: not ready after 60 s")
	case <-ctx.Done():
		b.close()
		return nil, ctx.Err()
	}
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (b *etcdBackend) requests() counts {
	return counts{b.sent.Load(), b.failed.Load()}
}

func (b *etcdBackend) close() {
	b.e.Close()
	_ = os.RemoveAll(b.dir)
}

// etcdCounter counts one client's requests, into its own totals and its
// backend's.
type etcdCounter struct {
	b            *etcdBackend
	sent, failed atomic.Int64
}

func (c *etcdCounter) count(ctx context.Context, err error) {
	c.b.sent.Add(1)
	c.sent.Add(1)
	if err != nil && !cutByWindow(ctx) {
		c.b.failed.Add(1)
		c.failed.Add(1)
	}
}

// unary counts each unary RPC (each attempt: it runs inside the client's
// retry interceptor).
func (c *etcdCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.count(ctx, err)
	return err
}

// stream counts each message a stream sends (a watch created or cancelled,
// a lease keep-alive); opening the stream is not a request of its own.
func (c *etcdCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.count(ctx, err)
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c}, nil
}

type countedStream struct {
	grpc.ClientStream
	c *etcdCounter
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	s.c.count(s.Context(), err)
	return err
}

// newWaiter makes a client of its own, through a proxy of its own (to cut
// it off), and a session.
func (b *etcdBackend) newWaiter(_ context.Context, name string) (*waiter, error) {
	px, err := newCutProxy(b.endpoint)
	if err != nil {
		return nil, err
	}
	c := &etcdCounter{b: b}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{px.addr()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(c.unary),
			grpc.WithChainStreamInterceptor(c.stream),
		},
	})
	if err != nil {
		px.close()
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(b.ttl))
	if err != nil {
		_ = cli.Close()
		px.close()
		return nil, err
	}
	m := concurrency.NewMutex(s, "/lockbench/"+name)
	l := lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return m.Unlock, nil
	})
	dead, kill := context.WithCancel(context.Background())
	var closed atomic.Bool
	return &waiter{
		locker: crashable{locker: l, dead: dead},
		// The client goes away without revoking its session's lease: its
		// key stays until the lease expires (the session's TTL).
		crash: func() {
			kill()
			if closed.CompareAndSwap(false, true) {
				_ = cli.Close()
				px.close()
			}
		},
		cut:      px.cut,
		requests: func() counts { return counts{c.sent.Load(), c.failed.Load()} },
		close: func() {
			kill()
			if closed.CompareAndSwap(false, true) {
				_ = s.Close() // revokes the session's lease
				_ = cli.Close()
				px.close()
			}
		},
	}, nil
}
