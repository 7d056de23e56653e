package ehbalance

// A processor: its life cycle (Start, Stop, Kill), its cycle loop (list,
// decide, write), and what it believes it owns.

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Processor is one member of a group of processors sharing the partitions
// whose ownership records live under a prefix. See the package
// documentation.
type Processor struct {
	st         store
	partitions []string
	known      map[string]bool
	cfg        config
	rnd        *rand.Rand // the loop's only

	mu      sync.Mutex
	started bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
	held    map[string]record // what the last cycle wrote, with the ETags it got: believed owned
}

// errKilled ends the loop without relinquishing: a crash.
var errKilled = errors.New("ehbalance: killed")

// New returns a processor for the partitions whose ownership records are
// the blobs prefix+partition in cc's container. It makes no request until
// started.
func New(cc *container.Client, prefix string, partitions []string, opts *Options) (*Processor, error) {
	if cc == nil {
		return nil, optionErr("container", "nil *container.Client")
	}
	if len(partitions) == 0 {
		return nil, optionErr("partitions", "none")
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	known := make(map[string]bool, len(partitions))
	for _, p := range partitions {
		if p == "" || known[p] {
			return nil, optionErr("partitions", "%q: empty or repeated", p)
		}
		known[p] = true
	}
	return &Processor{
		st: store{cc: cc, prefix: prefix}, partitions: slices.Clone(partitions), known: known, cfg: cfg,
		rnd:  rand.New(rand.NewPCG(cfg.seed, 0x65686261)), // "ehba"
		done: make(chan struct{}), held: map[string]record{},
	}, nil
}

// Start runs the processor's cycles in a goroutine it owns, the first at
// once, until Stop, Kill or ctx ends (which stops it as Stop does).
func (p *Processor) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("ehbalance: processor already started")
	}
	p.started = true
	ctx, p.cancel = context.WithCancelCause(ctx)
	go func() {
		defer close(p.done)
		p.run(ctx)
	}()
	return nil
}

// Stop stops the processor cleanly and waits for it: it stops believing
// it owns anything, then relinquishes the records it holds.
func (p *Processor) Stop() {
	p.end(context.Canceled)
}

// Kill stops the processor as a crash would, and waits for it: it stops
// believing it owns anything and makes no further request; its records
// stay until they expire.
func (p *Processor) Kill() {
	p.end(errKilled)
}

func (p *Processor) end(cause error) {
	p.mu.Lock()
	started := p.started
	if started {
		p.cancel(cause)
	}
	p.mu.Unlock()
	if started {
		<-p.done
	}
}

// Owned returns the partitions the processor believes it owns, in the
// group's order.
func (p *Processor) Owned() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, part := range p.partitions {
		if _, ok := p.held[part]; ok {
			out = append(out, part)
		}
	}
	return out
}

// run is the loop: a cycle at once, then one per jittered interval.
func (p *Processor) run(ctx context.Context) {
	for {
		// A cycle's requests end with it: one that hangs must not stall
		// the processor past its next cycle.
		cctx, cancel := context.WithTimeout(ctx, p.cfg.interval)
		p.cycle(cctx)
		cancel()
		t := time.NewTimer(p.wait())
		select {
		case <-ctx.Done():
			t.Stop()
			p.leave(context.Cause(ctx))
			return
		case <-t.C:
		}
	}
}

// wait is the time to the next cycle: the interval × [0.8, 1.3).
func (p *Processor) wait() time.Duration {
	return time.Duration(float64(p.cfg.interval) * (0.8 + p.rnd.Float64()/2))
}

// cycle lists the records, decides, writes, and updates what the processor
// believes it owns to what it wrote.
func (p *Processor) cycle(ctx context.Context) {
	listed, err := p.st.list(ctx, p.known)
	if err != nil {
		p.cfg.log.Debug("ehbalance: listing failed", slog.Any("error", err))
		return
	}
	if !p.cfg.nameOrder {
		p.rnd.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
	}
	v := assess(p.cfg.owner, p.partitions, listed, time.Now(), p.cfg.expiration)
	claims := decide(v, p.cfg.strategy, p.rnd)
	got := make(map[string]record, len(claims))
	for _, r := range claims {
		etag, lm, err := p.st.write(ctx, r, p.cfg.owner)
		switch {
		case errors.Is(err, errTaken):
			continue
		case err != nil:
			// The Go processor ends here (its Run returns the error); this
			// one keeps what it believed and tries again next cycle.
			p.cfg.log.Debug("ehbalance: a claim failed", slog.String("partition", r.partition), slog.Any("error", err))
			return
		}
		got[r.partition] = record{partition: r.partition, owner: p.cfg.owner, etag: etag, lastModified: lm}
	}
	p.mu.Lock()
	old := p.held
	p.held = got
	p.mu.Unlock()
	for _, part := range p.partitions {
		_, was := old[part]
		_, is := got[part]
		switch {
		case is && !was:
			p.cfg.log.Debug("ehbalance: claimed", slog.String("partition", part))
			p.cfg.onOwn(part)
		case was && !is:
			p.cfg.log.Debug("ehbalance: lost", slog.String("partition", part))
			p.cfg.onDisown(part)
		}
	}
}

// leave ends the processor's ownership: it stops believing, then, unless
// killed, relinquishes each record it holds (ownerid "" under the ETag of
// its last write), as the Go processor's close does, within a minute.
func (p *Processor) leave(cause error) {
	p.mu.Lock()
	held := p.held
	p.held = map[string]record{}
	p.mu.Unlock()
	for _, part := range p.partitions {
		if _, ok := held[part]; ok {
			p.cfg.onDisown(part)
		}
	}
	if errors.Is(cause, errKilled) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, part := range p.partitions {
		r, ok := held[part]
		if !ok {
			continue
		}
		if _, _, err := p.st.write(ctx, r, ""); err != nil && !errors.Is(err, errTaken) {
			p.cfg.log.Debug("ehbalance: relinquishing failed; the record expires instead", slog.String("partition", part), slog.Any("error", err))
			return // the SDK's ClaimOwnership stops at the first such error
		}
	}
}
