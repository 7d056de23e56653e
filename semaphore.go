package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/timing"
)

// MaxSlots is the most holders a [Semaphore] admits at once. Each try to
// acquire a Semaphore costs up to one request per slot, so large values make
// waiting expensive.
const MaxSlots = 256

// Semaphore admits up to n holders at once across every process that uses
// the same name and n: a Mutex that n holders can share, for work that
// tolerates some parallelism but not unbounded parallelism (at most two
// database migrations, four concurrent exports).
//
// It is n Mutexes on the lock blobs "name/slot-0" to "name/slot-<n-1>". A
// holder holds one slot: a [Lock] with its own lease, renewed automatically,
// its own context that ends when the slot is lost, and its own fencing
// token. Epochs count per slot, so a token fences writes among the holders
// of one slot ([Lock.Name] says which): use the slot's name and epoch
// together when the systems written to must reject stale holders (see
// [Token]).
//
// Every process must use the same n for a name. A process that uses a
// larger n admits more holders; one that uses a smaller n only sees fewer
// slots. A Semaphore is safe for concurrent use; each Acquire or TryAcquire
// is a separate holder. A zero or nil Semaphore is not usable: its methods
// return [ErrNotInitialized] (Slots returns 0).
type Semaphore struct {
	name  string
	slots []*Mutex
	cfg   holdConfig
	// health follows whether its requests reach storage, across its slots.
	health *storageHealth
}

// SlotName returns the lock blob of slot i of the semaphore name.
func SlotName(name string, i int) string { return name + "/slot-" + strconv.Itoa(i) }

// NewSemaphore returns a Semaphore of n slots (1 to [MaxSlots]) on the lock
// blobs SlotName(name, 0) … SlotName(name, n-1) in the container cc points
// at. opts configures every slot as it configures a [Mutex]; nil means the
// defaults. It makes no request.
func NewSemaphore(cc *container.Client, name string, n int, opts *MutexOptions) (*Semaphore, error) {
	if n < 1 || n > MaxSlots {
		return nil, optionErr("n", "%d: must be from 1 to %d", n, MaxSlots)
	}
	if r := blobNameProblem(name); r != "" {
		return nil, optionErr("name", "%q: %s", name, r)
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	s := &Semaphore{name: name, slots: make([]*Mutex, n), cfg: cfg, health: new(storageHealth)}
	for i := range s.slots {
		t, err := newTarget(cc, SlotName(name, i), "name")
		if err != nil {
			return nil, err
		}
		s.slots[i] = &Mutex{t: t, cfg: cfg, health: s.health}
	}
	return s, nil
}

// Slots returns n, the most holders the Semaphore admits at once.
func (s *Semaphore) Slots() int {
	if s == nil {
		return 0
	}
	return len(s.slots)
}

// initErr is ErrNotInitialized, naming the constructor, for a zero or nil
// Semaphore.
func (s *Semaphore) initErr() error {
	if s == nil || len(s.slots) == 0 {
		return fmt.Errorf("%w: a zero or nil azlease.Semaphore cannot be used; use NewSemaphore", ErrNotInitialized)
	}
	return nil
}

// TryAcquire takes a free slot if there is one, without waiting for a
// holder: ok is false and err is nil when every slot is held, a normal
// outcome. It tries the slots in turn from a random one, so that many
// callers spread over the slots; a try costs one request per slot it
// finds held. A failure that persists on a slot (see [Mutex.TryLock]) ends
// the try with that error rather than going on to the next slot.
//
// The Lock's context ends when the slot is lost; it carries ctx's values but
// not its cancellation. Unlock it to free the slot.
func (s *Semaphore) TryAcquire(ctx context.Context) (lock *Lock, ok bool, err error) {
	if err := s.initErr(); err != nil {
		return nil, false, err
	}
	n := len(s.slots)
	start := mrand.IntN(n)
	for k := range n {
		lock, ok, err := s.slots[(start+k)%n].TryLock(ctx)
		switch {
		case ok:
			return lock, true, nil
		case err != nil:
			return nil, false, err
		case ctx.Err() != nil:
			return nil, false, fmt.Errorf("azlease: semaphore %s: %w", s.name, context.Cause(ctx))
		}
	}
	return nil, false, nil
}

// Acquire waits until it takes a slot or ctx ends, trying every
// PollInterval (with jitter). Waiters are not served in order: whichever
// polls first after a slot frees takes it. Transient failures are retried
// until ctx ends, and the error then says what the last one was, or until
// every request has failed for MutexOptions.UnreachableTimeout (an error
// wrapping [ErrUnreachable]); other failures are returned at once.
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	if err := s.initErr(); err != nil {
		return nil, err
	}
	var last error
	for {
		lock, ok, err := s.TryAcquire(ctx)
		switch {
		case ok:
			return lock, nil
		case ctx.Err() != nil:
			return nil, s.waitErr(ctx, last)
		case err != nil && !errors.Is(err, ErrTransient):
			return nil, err
		case err != nil:
			last = err
			s.cfg.lease.log.Debug("azlease: semaphore attempt failed; retrying", slog.Any("error", err))
		}
		if err := s.unreachable(); err != nil {
			return nil, err
		}
		if !sleepCtx(ctx, timing.Jitter(s.cfg.poll, s.cfg.jitter, mrand.Float64())) {
			return nil, s.waitErr(ctx, last)
		}
	}
}

// unreachable is the error that ends Acquire's wait once every request to
// storage has failed for MutexOptions.UnreachableTimeout, or nil.
func (s *Semaphore) unreachable() error {
	if err := s.health.unreachable(time.Now(), s.cfg.unreachable, s.slots[0].t.endpoint()); err != nil {
		return fmt.Errorf("azlease: semaphore %s (%d slots): %w", s.name, len(s.slots), err)
	}
	return nil
}

func (s *Semaphore) waitErr(ctx context.Context, last error) error {
	if last != nil {
		return fmt.Errorf("azlease: semaphore %s (%d slots): %w; last attempt: %w", s.name, len(s.slots), context.Cause(ctx), lastAttempt(last))
	}
	return fmt.Errorf("azlease: semaphore %s (%d slots): %w", s.name, len(s.slots), context.Cause(ctx))
}

// Name returns the name of the lock blob the Lock holds: the Mutex's name,
// or for a [Semaphore], the slot's ([SlotName]); "" for a zero or nil Lock.
func (lk *Lock) Name() string {
	if lk == nil || lk.lease == nil {
		return ""
	}
	return lk.lease.t.blob
}
