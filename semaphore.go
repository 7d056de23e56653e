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

// MaxSlots is the most holders a [Semaphore] admits at once. A waiting
// Acquire reads every slot with one request per poll whatever n, but a
// TryAcquire tries the slots one by one (up to one request per slot), so
// large values make trying expensive.
const MaxSlots = 256

// Semaphore admits up to n holders at once across every process that uses
// the same name and n: a Mutex that n holders can share (at most two
// database migrations, four concurrent exports).
//
// It is n Mutexes on the lock blobs "name/slot-0" to "name/slot-<n-1>"
// ([SlotName]); a Semaphore of one slot is the Mutex on the lock blob name
// itself (and "azlease lock -n 1 name" is "azlease lock name"). A holder
// holds one slot: a [Lock] with its own lease, context and fencing token;
// epochs count per slot, so fence with the slot's name and epoch together.
// Waiters are served in order and cost what a Mutex's do ([Mutex]), with
// one List Blobs of the slots per look whatever n.
//
// Every process must use the same n for a name: a larger n admits more
// holders, a smaller one sees fewer slots (and one slot and more are
// different blobs: they do not exclude each other). Safe for concurrent
// use; each Acquire or TryAcquire is a separate holder. A zero or nil
// Semaphore returns [ErrNotInitialized] (Slots returns 0).
type Semaphore struct {
	name  string
	slots []*Mutex
	cfg   holdConfig
	// health follows whether its requests reach storage, across its slots.
	health *storageHealth
	// list reads every slot with one List Blobs request (more than one
	// slot): the blobs whose names start with slotPrefix(name).
	list *Lease
	// fair is its waiting queue, unless MutexOptions.Unordered.
	fair *fairLock
}

// SlotName returns the lock blob of slot i of the semaphore name when it has
// more than one slot: name + "/slot-" + i. A Semaphore of one slot uses the
// lock blob name itself.
func SlotName(name string, i int) string { return slotPrefix(name) + strconv.Itoa(i) }

// slotPrefix is what the names of the slots of the semaphore name start
// with, for listing them.
func slotPrefix(name string) string { return name + "/slot-" }

// NewSemaphore returns a Semaphore of n slots (1 to [MaxSlots]) on the lock
// blobs SlotName(name, 0) … SlotName(name, n-1) in the container cc points
// at, or, when n is 1, on the lock blob name itself (the [Mutex] on name).
// opts configures every slot as it configures a Mutex; nil means the
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
		blobName := name
		if n > 1 {
			blobName = SlotName(name, i)
		}
		t, err := newTarget(cc, blobName, "name")
		if err != nil {
			return nil, err
		}
		s.slots[i] = &Mutex{t: t, cfg: cfg, health: s.health}
	}
	if n > 1 {
		ct := s.slots[0].t
		s.list = newListLease(ct, slotPrefix(name), cfg.lease)
		s.list.health = s.health
	}
	if !cfg.unordered {
		t, err := newTarget(cc, name, "name")
		if err != nil {
			return nil, err
		}
		locks := make([]string, n)
		for i, m := range s.slots {
			locks[i] = m.t.blob
		}
		s.fair = &fairLock{
			name: name, q: newQueue(t, locks, cfg.lease, s.health), cfg: cfg, slots: s.slots,
			look: func(ctx context.Context, budget time.Duration) ([]Status, error) {
				if n == 1 {
					st, err := s.slots[0].newLease().inspect(ctx, time.Now().Add(budget))
					return []Status{st}, err
				}
				return s.look(ctx, budget)
			},
			unreachable: s.unreachable,
			what:        fmt.Sprintf("semaphore %s (%d slots)", name, n),
		}
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
// outcome. A fair Semaphore (the default) looks first: one request (a
// listing of the slots) when every slot is held, and it takes a free slot
// only when nobody waits in the queue (a first waiter that leaves a slot
// free is passed over, as [Mutex.TryLock] does). With MutexOptions.Unordered
// it tries the slots in turn from a random one, so that many callers spread
// over the slots, acquiring directly: it costs one request per slot it finds
// held (n requests, each refused with 409 LeaseAlreadyPresent, when every
// slot is held) and takes the first free one. Acquire, which waits, reads
// every slot with one request per poll instead, and acquires only a slot it
// found free. A failure that persists on a slot (see [Mutex.TryLock]) ends
// the try with that error rather than going on to the next slot.
//
// The Lock's context ends when the slot is lost; it carries ctx's values but
// not its cancellation. Unlock it to free the slot.
func (s *Semaphore) TryAcquire(ctx context.Context) (lock *Lock, ok bool, err error) {
	if err := s.initErr(); err != nil {
		return nil, false, err
	}
	if s.fair != nil {
		lk, _, err := s.fair.tryFree(ctx, true)
		return lk, lk != nil, err
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

// Acquire waits until it takes a slot or ctx ends. Each poll, every
// PollInterval (with jitter), is one request whatever n: one List Blobs
// request returns every slot's lease state and record (with one slot, a
// read of the lock blob, as [Mutex.Lock] makes); it then tries, from a
// random one, only the slots the listing shows free (available, expired,
// broken, or not created yet), so a waiter makes no request that fails
// while every slot is held. Taking a free slot costs what a TryLock costs
// (the listing stands in for the read its epoch write would make). Waiters
// are served in the order they asked, as a [Mutex]'s, in one queue per
// semaphore: only the first in line polls every HeadPollInterval, and a
// holder's Unlock hands its slot straight to it. With
// MutexOptions.Unordered, whichever polls first after a slot frees takes
// it. Transient failures are retried until ctx ends, and the error then says
// what the last one was, or until every request has failed for
// MutexOptions.UnreachableTimeout (an error wrapping [ErrUnreachable]);
// other failures are returned at once.
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	if err := s.initErr(); err != nil {
		return nil, err
	}
	if s.fair != nil {
		return s.fair.lock(ctx)
	}
	// One Lease per slot for the whole wait, as Mutex.Lock keeps one: a
	// lease ID refused with a definitive answer is proposed again.
	leases := make([]*Lease, len(s.slots))
	lease := func(i int) *Lease {
		if leases[i] == nil {
			leases[i] = s.slots[i].newLease()
		}
		return leases[i]
	}
	var last error
	for {
		lock, ok, err := s.lookThenAcquire(ctx, lease)
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

// lookThenAcquire is one poll of Acquire: it reads every slot, then tries
// the free ones from a random one. Each request's transient failures are
// retried for at most 2 × AttemptTimeout, as in TryAcquire.
func (s *Semaphore) lookThenAcquire(ctx context.Context, lease func(int) *Lease) (lock *Lock, ok bool, err error) {
	budget := 2 * s.cfg.lease.attemptTimeout
	n := len(s.slots)
	if n == 1 {
		return s.slots[0].lookThenLock(ctx, lease(0), budget)
	}
	sts, err := s.look(ctx, budget)
	if err != nil {
		return nil, false, err
	}
	start := mrand.IntN(n)
	for k := range n {
		i := (start + k) % n
		if sts[i].Leased {
			continue
		}
		l := lease(i)
		l.see(sts[i].Epoch)
		lock, ok, err := s.slots[i].tryLock(ctx, l, budget, &sts[i])
		switch {
		case ok:
			return lock, true, nil
		case err != nil:
			return nil, false, err
		case ctx.Err() != nil:
			return nil, false, fmt.Errorf("azlease: semaphore %s: %w", s.name, context.Cause(ctx))
		}
		// Taken since the listing: try the next free one.
	}
	return nil, false, nil
}

// look reads every slot with one List Blobs request (a request per 5,000
// blobs whose names start with the slots' prefix, which for slots of a
// larger n, or blobs of the user's named alike, can be more): sts[i] is
// slot i's status, with Exists false when its lock blob does not exist yet.
func (s *Semaphore) look(ctx context.Context, budget time.Duration) ([]Status, error) {
	listed, err := s.list.listPrefix(ctx, slotPrefix(s.name), time.Now().Add(budget))
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(s.slots))
	sts := make([]Status, len(s.slots))
	for i, m := range s.slots {
		index[m.t.blob] = i
		sts[i] = Status{Name: m.t.blob}
	}
	for _, st := range listed {
		if i, ok := index[st.Name]; ok {
			sts[i] = st
		}
	}
	return sts, nil
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
// or for a [Semaphore], the slot's ([SlotName]; the semaphore's own name
// when it has one slot); "" for a zero or nil Lock.
func (lk *Lock) Name() string {
	if lk == nil || lk.lease == nil {
		return ""
	}
	return lk.lease.t.blob
}
