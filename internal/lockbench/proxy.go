package main

// A loopback TCP proxy that can cut one client off for a while: the etcd
// contender's way to play a network that drops everything for some seconds
// and then works again (the azlease contenders do it in their transport).
// While cut, nothing is forwarded either way: what arrives is held and
// delivered once the cut ends, as TCP's retransmissions would deliver it, and
// new connections wait too. The connections stay open: gRPC sends no
// keep-alive pings in etcd's client unless told to, so none of them fails.

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// cutProxy forwards the connections it accepts on a loopback port to target.
type cutProxy struct {
	ln       net.Listener
	target   string
	cutUntil atomic.Int64 // unix nanoseconds; zero: not cut
	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
	wg       sync.WaitGroup
}

// newCutProxy listens on a free loopback port for connections to target.
func newCutProxy(target string) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is where clients connect.
func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cut holds everything for d from now.
func (p *cutProxy) cut(d time.Duration) { p.cutUntil.Store(time.Now().Add(d).UnixNano()) }

// await returns once no cut is in force, or false when the proxy closed.
func (p *cutProxy) await() bool {
	for {
		left := time.Until(time.Unix(0, p.cutUntil.Load()))
		if left <= 0 {
			return true
		}
		time.Sleep(min(left, 10*time.Millisecond))
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
	}
}

// track adds c to the open connections, or closes it when the proxy has
// closed.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() {
			if !p.await() {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				return
			}
			if !p.track(up) {
				_ = c.Close()
				return
			}
			var once sync.Once
			done := func() { once.Do(func() { _ = c.Close(); _ = up.Close() }) }
			p.wg.Go(func() { p.pipe(up, c); done() })
			p.pipe(c, up)
			done()
		})
	}
}

// pipe copies from src to dst, holding what it read while a cut is in force.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: done() closes the other side
		}
	}
}

// close stops accepting, closes every connection and waits for the copies.
func (p *cutProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
