package azlease

// The waiting queue of a fair Mutex or Semaphore (fairlock.go): who waits,
// in which order, and the blobs that say so.
//
// For the lock named NAME (a Mutex's lock blob, or a Semaphore's name):
//   - NAME/queue/tickets-<generation, 20 digits> gives the tickets: an
//     append blob, one byte appended per ticket, the ticket being where
//     storage put it (Append Block's offset), so tickets grow strictly in
//     the order storage accepted the appends, whatever the clocks of the
//     waiters' hosts say, and no append is refused for another's (take).
//   - NAME/queue/<ticket, 20 digits> is a waiter: created with its ticket,
//     its metadata holds the lease ID it announced (a holder hands the lock
//     to an ID derived from it: succession.go), its identity, when it began
//     to wait (its wall clock, for display), the poll intervals it runs
//     with (so that others judge its silence by its own pace), and, once it
//     is first in line and polls the lock every HeadPollInterval, when that
//     began (the head mark). List Blobs returns them in name order, which
//     is ticket order.
//
// The queue is listed with the lock's own blobs (a Mutex's lock blob, a
// Semaphore's slots): one List Blobs request under the longest prefix
// they share with the queue, which tells every waiter the lock's lease
// state at no extra request (blobs that merely share the prefix are left
// out).
//
// Waiter blobs have no lease: waiting costs no renewals. A waiter that
// gives up deletes its blob. One that dies leaves it: when its turn comes
// and it does not take the lock in time, the holder passes the lock on and
// marks it missed. Missed waiters keep their ticket but are passed over
// until they show they are there (a waiter that finds itself missed writes
// its head mark, which clears it, and is first again); one still missed
// MaxQueueLook after it was marked (storage's clock: its blob's
// Last-Modified against a listing's Date) is dead, and the next holder
// removes it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/timing"
)

// Metadata keys of the queue's blobs.
const (
	metaWaiterID      = "azleasewaiterid" // a waiter: the lease ID it announced
	metaWaiterHolder  = "azleaseholder"   // a waiter: its identity (escaped)
	metaWaiterSince   = "azleasesince"    // a waiter: when it began to wait (ms since 1970, its clock)
	metaWaiterHead    = "azleasehead"     // a waiter: when it began to poll as the first in line
	metaWaiterMissed  = "azleasemissed"   // a waiter: its turn came and it did not take the lock
	metaWaiterLooks   = "azleaselooks"    // a waiter: its HeadPollInterval and PollInterval, in ms ("200,1000")
	metaWaiterPoll    = "azleasepoll"     // the same for older versions, its PollInterval as their first in line's longest look
	queueSuffix       = "/queue"
	ticketDigits      = 20
	maxTicketAttempts = 20 // appends and listings tried for one ticket before giving up
	// ticketsPrefix names a tickets blob under the queue's prefix:
	// NAME/queue/tickets-<generation, 20 digits>.
	ticketsPrefix = "tickets-"
	// ticketsPerGeneration spaces generations' tickets: a generation's
	// offsets stay under rotateAt + 1.
	ticketsPerGeneration = 100_000
)

// rotateAt is the offset at which a generation is turned: well below the
// 50,000 blocks an append blob holds, so that joiners that listed before the
// turn still find room (a variable for tests).
var rotateAt uint64 = 40_000

// ticketBlock is what one ticket appends: one byte, so that a block's
// offset is its index.
var ticketBlock = []byte{'T'}

// QueueName returns the prefix of the waiter blobs of the fair lock name
// (a Mutex's lock blob name, or a Semaphore's name): name + "/queue/". The
// blobs that give the tickets live under it too (name +
// "/queue/tickets-<generation>").
func QueueName(name string) string { return name + queueSuffix + "/" }

// Waiter is one entry of a fair lock's queue, as [InspectQueue] reads it.
type Waiter struct {
	// Ticket orders the queue: the lower, the sooner served. Tickets are
	// given by storage in the order waiters asked.
	Ticket uint64
	// Holder is the waiter's identity.
	Holder string
	// Since is when it began to wait, by its own wall clock; for display.
	Since time.Time
	// Head is true once it is first in line and polls the lock every
	// HeadPollInterval (MutexOptions).
	Head bool
	// Missed is true when its turn came and it did not take the lock in
	// time: it is passed over until it shows it is there. A later
	// holder's Unlock removes it once it has been silent for 300 × its
	// PollInterval; until then it stays listed (a waiter that died too).
	Missed bool
}

// waiter is a queue entry as a listing found it.
type waiter struct {
	Waiter
	name     string      // its blob
	key      string      // the ticket as the hand-off marker names it
	id       string      // the lease ID it announced
	etag     azcore.ETag // as listed, for conditional writes and deletes
	modified time.Time   // its blob's Last-Modified, storage's clock
	// written is when its entry was last written at the earliest, on the
	// local clock: modified against the listing's Date, a second earlier
	// (whole seconds); zero when the listing does not tell.
	written time.Time
	// headPoll and poll are the intervals it waits with (its
	// MutexOptions), zero when its entry does not say (an older version).
	headPoll, poll time.Duration
	// older is true when its entry does not say its paces under
	// metaWaiterLooks: a version before timing.NearCap, whose waiters
	// behind the first may sleep longer (timing.OlderWaiterSchedule).
	older bool
}

// schedule is the look schedule w follows, as its watcher counts it, with
// the pace bound pace (timing.WaiterSchedule; an older version's, when its
// entry says so).
func (w waiter) schedule(cfg holdConfig, pace time.Duration) timing.Schedule {
	head, poll := w.paces(cfg)
	if w.older {
		return timing.OlderWaiterSchedule(head, poll, pace)
	}
	return timing.WaiterSchedule(head, poll, pace)
}

// paces returns w's head poll and poll intervals, or, when its entry does
// not say, the reader's own (cfg).
func (w waiter) paces(cfg holdConfig) (headPoll, poll time.Duration) {
	headPoll, poll = w.headPoll, w.poll
	if headPoll <= 0 {
		headPoll = cfg.headPoll
	}
	if poll <= 0 {
		poll = cfg.poll
	}
	return headPoll, poll
}

// queue is the waiting queue of one fair lock.
type queue struct {
	lock   string   // the lock's name
	locks  []string // the lock's blobs, in slot order (nil: list the queue alone)
	prefix string   // what a listing asks for: the longest prefix of the queue and the lock's blobs
	ops    *Lease   // requests on the tickets and entries (its loop, health and metrics)
	lister *Lease   // listings of the waiters
	// gens is the tickets generation this queue value last appended to or
	// listed (take): a join within genTrust of it appends without listing.
	gens genCache
}

// genCache is the newest tickets generation one queue value knows of, so
// that a join costs an append and no listing of the tickets blobs (a hot
// lock's contender saved a request an acquisition).
type genCache struct {
	mu    sync.Mutex
	known bool
	gen   uint64
	next  uint64    // past the highest offset an append to gen returned
	at    time.Time // when a listing or an append last showed gen there
}

// genTrust is how long a cached generation is appended to without a
// listing. A stale one costs nothing in order: an append to a generation
// that has a newer one lands past rotateAt and is not used (take lists
// then), one to a deleted generation is answered 404 (counted as failed,
// at most once a genTrust, and only after keptGenerations whole
// generations), and one to a generation made anew since (a joiner held up
// for keptGenerations generations creates it, then deletes it again) is
// seen by its offset going back, and not used.
const genTrust = time.Minute

// get returns the cached generation and the least offset an append to it
// can now land at, when it was shown within genTrust of now.
func (c *genCache) get(now time.Time) (gen, next uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known || now.Sub(c.at) >= genTrust {
		return 0, 0, false
	}
	return c.gen, c.next, true
}

// saw notes that generation gen exists at now, and that an append to it
// landed before offset next (0 for a listing or a create).
func (c *genCache) saw(gen, next uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.known || gen > c.gen:
		c.known, c.gen, c.next = true, gen, next
	case gen < c.gen:
		return // an older generation, seen by a join held up: keep the newer
	default:
		c.next = max(c.next, next)
	}
	c.at = now
}

// forget drops the cached generation gen (it was not found).
func (c *genCache) forget(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known && c.gen == gen {
		c.known = false
	}
}

// newQueue returns the queue of the fair lock t names; locks are the lock's
// blobs (a Mutex's own, a Semaphore's slots), which its listings return
// too (none: the queue alone).
func newQueue(t target, locks []string, cfg leaseConfig, health *storageHealth) *queue {
	ct := t
	ct.blob = t.blob + queueSuffix
	ops := newLease(ct, cfg)
	ops.health = health
	prefix := QueueName(t.blob)
	if len(locks) > 0 {
		prefix = commonPrefix(append([]string{prefix}, locks...))
	}
	lister := newListLease(t, prefix, cfg)
	lister.health = health
	return &queue{lock: t.blob, locks: locks, prefix: prefix, ops: ops, lister: lister}
}

// ticketKey is a ticket as a waiter's blob name and the hand-off marker
// carry it: 20 digits, so that name order is ticket order.
func ticketKey(t uint64) string {
	s := strconv.FormatUint(t, 10)
	return strings.Repeat("0", ticketDigits-len(s)) + s
}

// take takes the next ticket: one Append Block of one byte to the
// queue's tickets blob (an append blob), whose answer says where the block
// went (x-ms-blob-append-offset): storage orders concurrent appends, so
// tickets grow strictly in the order storage accepted them, and no append
// is ever refused for another's (issue 35: the counter's conditional write
// lost races with 412s). The ticket is generation × ticketsPerGeneration +
// offset + 1. Finding the generation costs one listing of the tickets
// blobs, unless this queue value appended to it within genTrust. An append
// whose outcome is unknown is not trusted: the next one gives a later
// ticket (a ticket may go unused; order only needs tickets to grow).
//
// An append blob holds at most 50,000 blocks: the waiter whose append
// landed at offset rotateAt creates the next generation (turn: and deletes
// an old one), and a ticket at or past rotateAt is never used
// (its waiter appends again to the next generation), so that every ticket
// of a generation was appended before the next one existed: ticket order is
// storage's order across generations too.
func (q *queue) take(ctx context.Context, limit time.Time) (uint64, error) {
	l := q.ops
	// gen is the newest generation as last listed, or as this queue value
	// last appended to (cached: an append sent now lands at seen or past
	// it, unless the generation was made anew since).
	gen, seen, known := q.gens.get(time.Now())
	cached := known
	for tries := 0; ; tries++ {
		if tries >= maxTicketAttempts {
			return 0, l.errorf("write", ErrTransient, fmt.Errorf("no ticket after %d appends and listings of the queue's tickets", maxTicketAttempts))
		}
		if !known {
			newest, found, err := q.newestGeneration(ctx, limit)
			switch {
			case err != nil:
				return 0, err
			case !found && tries == 0:
				// A fair holder that took the lock free creates the
				// first generation (tryFree): give its request a moment
				// rather than race it (one of two creates fails).
				if !sleepCtx(ctx, time.Duration(5+mrand.Int64N(20))*time.Millisecond) {
					return 0, l.canceled(ctx, "write", q.tickets(0), nil)
				}
				continue
			case !found:
				if _, err := q.createGeneration(ctx, limit, 0); err != nil {
					return 0, err
				}
				newest = 0
			}
			gen, known, cached = newest, true, false
			q.gens.saw(gen, 0, time.Now())
		}
		off, full, missing, err := q.appendTicket(ctx, limit, gen)
		switch {
		case err != nil:
			return 0, err
		case missing:
			q.gens.forget(gen)
			known = false // deleted (a generation long past), or the container is gone
			continue
		case cached && !full && off < seen:
			// The cached generation was made anew since (its offsets went
			// back): its tickets are not in storage's order. List.
			q.gens.forget(gen)
			known, cached = false, false
			continue
		case !full && off < rotateAt:
			q.gens.saw(gen, off+1, time.Now())
			return gen*ticketsPerGeneration + off + 1, nil
		case !full && off == rotateAt:
			// This waiter's append is the one that turns the generation:
			// it creates the next (nobody else got this offset, so no
			// create races it but a late joiner's, below).
			if gen, err = q.turn(ctx, limit, gen); err != nil {
				return 0, err
			}
			cached = false
			q.gens.saw(gen, 0, time.Now())
			continue
		}
		cached = false
		// Past rotateAt (or full): the next generation exists, or its
		// creator is late or died. List, and create it if it is not there.
		newest, found, err := q.newestGeneration(ctx, limit)
		switch {
		case err != nil:
			return 0, err
		case found && newest > gen:
			gen = newest
			q.gens.saw(gen, 0, time.Now())
			continue
		}
		if gen, err = q.turn(ctx, limit, gen); err != nil {
			return 0, err
		}
		q.gens.saw(gen, 0, time.Now())
	}
}

// keptGenerations is how many generations before the newest are kept: the
// one that creates a generation deletes the one keptGenerations + 1 before
// it, which no joiner appends to unless it was held up between its listing
// and its append for keptGenerations whole generations (160,000 joins).
const keptGenerations = 4

// turn creates the generation after gen and returns the one to append to
// now. A create that finds it there is another joiner's. One that makes it
// is checked by a listing: when a newer generation exists, this joiner was
// held up for longer than keptGenerations and made again one that had been
// deleted (whose offsets were given already); it deletes it again and goes
// to the newest. Otherwise it deletes the generation keptGenerations + 1
// before the new one.
func (q *queue) turn(ctx context.Context, limit time.Time, gen uint64) (uint64, error) {
	next := gen + 1
	created, err := q.createGeneration(ctx, limit, next)
	if err != nil || !created {
		return next, err
	}
	newest, found, err := q.newestGeneration(ctx, limit)
	switch {
	case err != nil:
		return 0, err
	case found && newest > next:
		q.deleteGeneration(ctx, next)
		return newest, nil
	}
	if next > keptGenerations {
		q.deleteGeneration(ctx, next-keptGenerations-1)
	}
	return next, nil
}

// tickets is the name of the tickets blob of generation gen.
func (q *queue) tickets(gen uint64) string {
	return QueueName(q.lock) + ticketsPrefix + ticketKey(gen)
}

// parseTickets reads a tickets blob's generation from its name, under the
// lock's queue.
func parseTickets(lock, name string) (gen uint64, ok bool) {
	key, found := strings.CutPrefix(name, QueueName(lock)+ticketsPrefix)
	if !found || len(key) != ticketDigits || strings.Trim(key, "0123456789") != "" {
		return 0, false
	}
	gen, err := strconv.ParseUint(key, 10, 64)
	return gen, err == nil && gen <= maxGeneration
}

// maxGeneration bounds the generations a listing is trusted with: tickets
// stay under 2^62 (a blob named past it, not azlease's, is ignored).
const maxGeneration = (1<<62)/ticketsPerGeneration - 1

// newestGeneration lists the tickets blobs (one or two, a request) and
// returns the newest generation; found is false when there is none.
func (q *queue) newestGeneration(ctx context.Context, limit time.Time) (gen uint64, found bool, err error) {
	sts, _, err := q.ops.listPrefixAt(ctx, QueueName(q.lock)+ticketsPrefix, limit)
	if err != nil {
		return 0, false, err
	}
	for _, st := range sts {
		if g, ok := parseTickets(q.lock, st.Name); ok && (!found || g > gen) {
			gen, found = g, true
		}
	}
	return gen, found, nil
}

// appendTicket appends one block to generation gen's tickets blob and
// returns where it went; full when the blob holds all the blocks it can,
// missing when it does not exist. A transient failure is retried with
// another append (the first may have been applied: its offset goes unused).
func (q *queue) appendTicket(ctx context.Context, limit time.Time, gen uint64) (off uint64, full, missing bool, err error) {
	l := q.ops
	name := q.tickets(gen)
	abc := l.t.cc.NewAppendBlobClient(name)
	err = l.loopOn(ctx, "write", name, limit, func(actx context.Context, _ time.Time) (bool, error) {
		// A seekable body: azblob v1.8.1's AppendBlock answers nothing,
		// and no error, for a body it cannot rewind.
		resp, err := abc.AppendBlock(actx, streaming.NopCloser(bytes.NewReader(ticketBlock)), nil)
		if bloberror.HasCode(err, bloberror.BlockCountExceedsLimit) {
			full = true
			return true, nil
		}
		switch c := classify(ctx, err); c {
		case classOK:
		case classNotFound:
			missing = true
			return true, nil
		default:
			return l.attemptEnd("write", c, err)
		}
		if resp.BlobAppendOffset == nil {
			return false, l.errorf("write", ErrTransient, errors.New("the Append Block answer has no offset"))
		}
		n, perr := strconv.ParseUint(*resp.BlobAppendOffset, 10, 64)
		if perr != nil {
			return false, l.errorf("write", ErrTransient, fmt.Errorf("the Append Block answer has the offset %q", echo(*resp.BlobAppendOffset)))
		}
		// Blocks of another size than azlease's (a foreign writer) only
		// move offsets on: past rotateAt, the next generation is used.
		off = min(n, rotateAt+1)
		return true, nil
	})
	return off, full, missing, err
}

// createGeneration creates generation gen's tickets blob, an empty append
// blob, if it does not exist (and the container, on first use, when the
// lock may create it). Another waiter's having created it is success;
// created says whether this call made it (an attempt whose answer was lost
// and whose retry found the blob counts as not).
func (q *queue) createGeneration(ctx context.Context, limit time.Time, gen uint64) (created bool, err error) {
	l := q.ops
	name := q.tickets(gen)
	abc := l.t.cc.NewAppendBlobClient(name)
	createdContainer := false
	err = l.loopOn(ctx, "create", name, limit, func(actx context.Context, _ time.Time) (bool, error) {
		_, err := abc.Create(actx, &appendblob.CreateOptions{
			AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)},
			},
		})
		if bloberror.HasCode(err, bloberror.ContainerNotFound) && l.cfg.create && !createdContainer {
			createdContainer = true
			if _, cerr := l.t.cc.Create(actx, nil); cerr != nil && !bloberror.HasCode(cerr, bloberror.ContainerAlreadyExists) {
				return false, l.errorf("create", kindOf(classify(ctx, cerr)), cerr)
			}
			return false, l.errorf("create", ErrTransient, errors.New("created the container"))
		}
		switch c := classify(ctx, err); c {
		case classOK:
			created = true
			return true, nil
		case classExists, classConflict:
			return true, nil
		default:
			return l.attemptEnd("create", c, err)
		}
	})
	return created, err
}

// deleteGeneration deletes generation gen's tickets blob, one attempt: a
// blob left behind costs nothing but its listing.
func (q *queue) deleteGeneration(ctx context.Context, gen uint64) {
	l := q.ops
	bc := l.t.cc.NewBlobClient(q.tickets(gen))
	actx, cancel := context.WithTimeout(noRetry(ctx), l.cfg.attemptTimeout)
	defer cancel()
	_, _ = bc.Delete(actx, nil)
}

// join puts a waiter with ticket into the queue: its blob, created only if
// absent, with the lease ID it announces, its identity and the intervals
// it polls with.
func (q *queue) join(ctx context.Context, limit time.Time, ticket uint64, announced, identity string, headPoll, poll time.Duration) (waiter, error) {
	l := q.ops
	key := ticketKey(ticket)
	name := QueueName(q.lock) + key
	now := time.Now().UTC().Truncate(time.Millisecond)
	w := waiter{Waiter: Waiter{Ticket: ticket, Holder: identity, Since: now}, name: name, key: key, id: announced, headPoll: headPoll, poll: poll}
	md := waiterMetadata(w)
	bbc := l.t.cc.NewBlockBlobClient(name)
	err := l.loopOn(ctx, "write", name, limit, func(actx context.Context, _ time.Time) (bool, error) {
		resp, err := bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			Metadata: md,
			AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)},
			},
		})
		switch c := classify(ctx, err); c {
		case classOK:
			w.etag = *resp.ETag
			return true, nil
		case classExists, classConflict:
			// A retry whose first attempt was applied: tickets are never
			// given twice, so the blob is this waiter's.
			return true, nil
		case classTransient:
			return false, l.errorf("write", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, l.errorf("write", ErrPermanent, err)
		}
	})
	return w, err
}

// queueView is one listing of a queue: its waiters in ticket order, and
// the lock's blobs as the same request found them.
type queueView struct {
	ws []waiter
	// locks are the lock's blobs, in slot order (Exists false for one not
	// created yet); nil when the queue lists the queue alone.
	locks []Status
	// date is storage's clock when it answered (zero if unknown), to tell
	// how long ago a waiter's blob last changed.
	date time.Time
	// sent and got are when the listing was sent and answered, on the
	// local clock.
	sent, got time.Time
	// tickets is true when the queue's tickets blob exists (a
	// generation of it was listed).
	tickets bool
}

// waiters lists the queue, in ticket order.
func (q *queue) waiters(ctx context.Context, limit time.Time) ([]waiter, error) {
	v, err := q.list(ctx, limit)
	return v.ws, err
}

// list lists the queue and the lock's blobs with one request (one per
// 5,000 blobs under q.prefix).
func (q *queue) list(ctx context.Context, limit time.Time) (queueView, error) {
	v := queueView{sent: time.Now()}
	sts, date, err := q.lister.listPrefixAt(ctx, q.prefix, limit)
	v.got = time.Now()
	if err != nil {
		return v, err
	}
	v.date = date
	v.ws = make([]waiter, 0, len(sts))
	if q.locks != nil {
		v.locks = make([]Status, len(q.locks))
		for i, n := range q.locks {
			v.locks[i] = Status{Name: n}
		}
	}
	entries := QueueName(q.lock)
	for _, st := range sts {
		if strings.HasPrefix(st.Name, entries) {
			if _, ok := parseTickets(q.lock, st.Name); ok {
				v.tickets = true
				continue
			}
			if w, ok := parseWaiter(q.lock, st); ok {
				w.written = writtenBy(v.sent, date, w.modified)
				v.ws = append(v.ws, w)
			}
			continue
		}
		if i := slices.Index(q.locks, st.Name); i >= 0 {
			v.locks[i] = st
		}
	}
	return v, nil
}

// noTicket is no waiter's ticket: effective's self for a caller that is
// not in the queue.
const noTicket = ^uint64(0)

// effective returns the waiters that take part in hand-offs: all but those
// marked missed, except self (its own entry, whatever its marks; noTicket
// for none).
func effective(ws []waiter, self uint64) []waiter {
	out := make([]waiter, 0, len(ws))
	for _, w := range ws {
		if !w.Missed || w.Ticket == self {
			out = append(out, w)
		}
	}
	return out
}

// writtenBy is the earliest instant on the local clock at which a blob
// storage dates modified was written, as an answer dated date to a request
// sent at sent tells: sent less the blob's age by storage's clock, and a
// second (Date and Last-Modified are whole seconds). Zero when one of them
// is unknown.
func writtenBy(sent, date, modified time.Time) time.Time {
	if sent.IsZero() || date.IsZero() || modified.IsZero() {
		return time.Time{}
	}
	return sent.Add(-date.Sub(modified) - time.Second)
}

// writtenNoLaterThan is the latest instant on the local clock at which a
// blob storage dates modified was written, as an answer dated date and got
// at got tells: got less the blob's age by storage's clock, and a second
// later (whole seconds). Zero when one of them is unknown.
func writtenNoLaterThan(got, date, modified time.Time) time.Time {
	if got.IsZero() || date.IsZero() || modified.IsZero() {
		return time.Time{}
	}
	return got.Add(-date.Sub(modified) + time.Second)
}

// parseWaiter reads a waiter from its listed blob; ok is false for a blob
// that is not one (a name that is not a ticket, no announced ID).
func parseWaiter(lock string, st Status) (waiter, bool) {
	key := strings.TrimPrefix(st.Name, QueueName(lock))
	if len(key) != ticketDigits || strings.Trim(key, "0123456789") != "" {
		return waiter{}, false
	}
	t, err := strconv.ParseUint(key, 10, 64)
	id, ok := lookup(st.raw, metaWaiterID)
	if err != nil || !ok || id == "" {
		return waiter{}, false
	}
	w := waiter{Waiter: Waiter{Ticket: t}, name: st.Name, key: key, id: id, etag: st.etag, modified: st.modified}
	if v, ok := lookup(st.raw, metaWaiterHolder); ok {
		w.Holder, _ = url.QueryUnescape(v)
	}
	if v, ok := lookup(st.raw, metaWaiterSince); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			w.Since = time.UnixMilli(ms).UTC()
		}
	}
	if v, ok := lookup(st.raw, metaWaiterHead); ok && v != "" {
		w.Head = true
	}
	if v, ok := lookup(st.raw, metaWaiterMissed); ok && v != "" {
		w.Missed = true
	}
	// An entry of this version says its paces under metaWaiterLooks. One of
	// an older version says them under metaWaiterPoll alone; its first in
	// line looks at most every PollInterval, and taking its PollInterval as
	// this version's (which looks up to timing.HeadCap of it) only makes
	// its watcher wait longer; its waiters behind the first may sleep
	// longer than this version's (older: timing.OlderWaiterSchedule).
	if v, ok := lookup(st.raw, metaWaiterLooks); ok {
		w.headPoll, w.poll = parsePaces(v)
	} else {
		w.older = true
		if v, ok := lookup(st.raw, metaWaiterPoll); ok {
			w.headPoll, w.poll = parsePaces(v)
		}
	}
	return w, true
}

// formatPaces is the metaWaiterLooks value for the intervals head and poll.
func formatPaces(head, poll time.Duration) string {
	return strconv.FormatInt(head.Milliseconds(), 10) + "," + strconv.FormatInt(poll.Milliseconds(), 10)
}

// parsePaces reads a metaWaiterLooks or metaWaiterPoll value; an interval
// it cannot read, or outside what MutexOptions allow, is zero (the
// reader's own is used).
func parsePaces(v string) (head, poll time.Duration) {
	h, p, ok := strings.Cut(v, ",")
	if !ok {
		return 0, 0
	}
	parse := func(s string, lo time.Duration) time.Duration {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms <= 0 || ms > MaxPollInterval.Milliseconds() {
			return 0
		}
		return max(time.Duration(ms)*time.Millisecond, lo)
	}
	return parse(h, 20*time.Millisecond), parse(p, 100*time.Millisecond)
}

// markHead writes the head mark on w's blob (keeping its other metadata,
// clearing a missed mark): w is first in line and polls every
// HeadPollInterval from now on. It is conditional on the blob as listed;
// a failure only costs w a longer wait from the next holder.
func (q *queue) markHead(ctx context.Context, w waiter) error {
	md := waiterMetadata(w)
	md[metaWaiterHead] = to.Ptr(strconv.FormatInt(time.Now().UnixMilli(), 10))
	return q.setWaiter(ctx, w, md)
}

// clearMissed rewrites w's blob without its missed mark (nor a head mark):
// w, passed over while it did not look, shows it is there and takes its
// place again.
func (q *queue) clearMissed(ctx context.Context, w waiter) error {
	return q.setWaiter(ctx, w, waiterMetadata(w))
}

// markMissed writes the missed mark on w's blob, conditional on the blob as
// listed (a waiter that has written its head mark since keeps its place).
func (q *queue) markMissed(ctx context.Context, w waiter) error {
	md := waiterMetadata(w)
	md[metaWaiterMissed] = to.Ptr("1")
	return q.setWaiter(ctx, w, md)
}

// waiterMetadata is what every write of w's blob keeps: the ID it
// announced, its holder's name, since when it waits and its paces, without
// a head or missed mark. Older versions read its paces from
// metaWaiterPoll, taking the poll there as the longest the first in line
// waits between two looks: so it says timing.OlderPoll of its
// PollInterval there, with which their schedule never expects it to look
// sooner than it does.
func waiterMetadata(w waiter) map[string]*string {
	md := map[string]*string{
		metaWaiterID:     to.Ptr(w.id),
		metaWaiterHolder: to.Ptr(url.QueryEscape(w.Holder)),
		metaWaiterSince:  to.Ptr(strconv.FormatInt(w.Since.UnixMilli(), 10)),
	}
	if w.headPoll > 0 && w.poll > 0 {
		md[metaWaiterLooks] = to.Ptr(formatPaces(w.headPoll, w.poll))
		md[metaWaiterPoll] = to.Ptr(formatPaces(w.headPoll, timing.OlderPoll(w.poll)))
	}
	return md
}

func (q *queue) setWaiter(ctx context.Context, w waiter, md map[string]*string) error {
	return q.ops.setMetadataIf(ctx, w.name, md, w.etag)
}

// miss marks w missed, conditional on its entry as listed, and reports
// whether it is marked now: by this write, or by an earlier attempt of it
// whose answer was lost (then the entry, read again, says so; when it
// cannot be read, a write whose outcome is unknown counts as marked). When
// it is not, changed tells whether its entry changed since it was listed
// (its waiter wrote it, or a write of settleMiss whose answer was lost
// did), and cur is the entry as last read (its ETag is stale when
// settleMiss rewrote it; callers use cur only when changed).
//
// A failed mark is settled (non-negotiable 4) before it is reported as not
// made: an attempt whose answer was lost may reach storage later, and then
// it would mark a waiter that has been looking all along, passing it over
// once. settleMiss makes sure it never can.
func (q *queue) miss(ctx context.Context, w waiter) (marked bool, cur waiter, changed bool) {
	err := q.markMissed(ctx, w)
	if err == nil {
		return true, w, false
	}
	return q.settleMiss(ctx, w, err)
}

// settleMissTries bounds settleMiss's rounds (a read, and a write whose
// answer may be lost again).
const settleMissTries = 3

// settleMiss settles a missed mark on w that failed with err (the last
// attempt's error; an earlier attempt's answer may have been lost). It
// reads the entry: marked (an attempt was applied), gone, or changed since
// it was listed (the mark, conditional on the entry as listed, can no
// longer be applied) settle it. The entry as listed, unmarked, does not:
// an attempt may still be on its way. Then it writes the entry as it is,
// conditional on the same ETag, so that no attempt of the mark can be
// applied after it, and reads again.
func (q *queue) settleMiss(ctx context.Context, w waiter, err error) (marked bool, cur waiter, changed bool) {
	// unknown: an attempt may have been applied, or may yet be. Otherwise
	// storage refused the mark for good, and no attempt was applied unseen.
	unknown := ambiguous(err) || errors.Is(err, ErrTransient)
	for range settleMissTries {
		c, ok, md, rerr := q.reread(ctx, w)
		switch {
		case rerr != nil:
			return unknown, w, false // a write whose outcome is unknown counts as marked
		case !ok:
			return false, w, false // gone: it left, or a holder removed it
		case c.Missed:
			return true, c, false
		case c.etag != w.etag:
			return false, c, true
		case !unknown:
			return false, c, false
		}
		// The fence: its own failure is read again in the next round.
		if q.ops.setMetadataIf(ctx, w.name, md, w.etag) == nil {
			return false, c, false // written as it was: the mark can no longer be applied
		}
	}
	return true, w, false // still unknown: counts as marked
}

// reread reads w's entry again, for its current ETag and marks, and its
// metadata as stored; ok is false when it is gone.
func (q *queue) reread(ctx context.Context, w waiter) (cur waiter, ok bool, md map[string]*string, err error) {
	l := q.ops
	bc := l.t.cc.NewBlobClient(w.name)
	err = l.loopOn(ctx, "read", w.name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		props, err := bc.GetProperties(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
		case classNotFound:
			return true, nil
		default:
			return l.attemptEnd("read", c, err)
		}
		st := Status{Name: w.name, raw: props.Metadata}
		if props.ETag != nil {
			st.etag = *props.ETag
		}
		cur, ok = parseWaiter(q.lock, st)
		md = props.Metadata
		return true, nil
	})
	return cur, ok, md, err
}

// remove deletes w's blob: conditional on the blob as listed when
// ifUnchanged (a holder removing a waiter that missed its turn twice), or
// whatever it holds (a waiter leaving). Its outcome does not matter much: a
// waiter left behind is removed when its turn comes.
func (q *queue) remove(ctx context.Context, w waiter, ifUnchanged bool) error {
	l := q.ops
	bc := l.t.cc.NewBlobClient(w.name)
	opts := &blob.DeleteOptions{}
	if ifUnchanged && w.etag != "" {
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(w.etag)}}
	}
	return l.loopOn(ctx, "write", w.name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		_, err := bc.Delete(actx, opts)
		switch c := classify(ctx, err); c {
		case classOK, classNotFound:
			return true, nil
		default:
			return l.attemptEnd("write", c, err)
		}
	})
}

// InspectQueue reads the waiting queue of the fair lock name (a Mutex's lock
// blob name, or a Semaphore's name) in the container cc points at, first in
// line first. It needs only read access: one List Blobs request per 5,000
// waiters. Transient failures are retried for at most 6 s, never past
// ctx's deadline. An unordered lock (MutexOptions.Unordered) has no queue.
func InspectQueue(ctx context.Context, cc *container.Client, name string) ([]Waiter, error) {
	t, err := newTarget(cc, name, "name")
	if err != nil {
		return nil, err
	}
	cfg, _ := (*LeaseOptions)(nil).config("")
	q := newQueue(t, nil, cfg, new(storageHealth))
	ws, err := q.waiters(ctx, time.Now().Add(2*cfg.attemptTimeout))
	if err != nil {
		return nil, err
	}
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		out[i] = w.Waiter
	}
	return out, nil
}

// QueueEntry reports whether st, as [InspectPrefix] lists it, is a waiter's
// entry in a fair lock's queue (a blob NAME/queue/<ticket>), and returns
// the lock's name and the waiter as [InspectQueue] reads it. It makes no
// request; [Status.Leased] and the term fields mean nothing for an entry.
func (st Status) QueueEntry() (lock string, w Waiter, ok bool) {
	i := strings.LastIndex(st.Name, queueSuffix+"/")
	if i <= 0 {
		return "", Waiter{}, false
	}
	lock = st.Name[:i]
	x, ok := parseWaiter(lock, st)
	if !ok {
		return "", Waiter{}, false
	}
	return lock, x.Waiter, true
}

// QueueCounter reports whether st, as [InspectPrefix] lists it, is a blob
// that gives a fair lock's queue its tickets (NAME/queue/tickets-<generation>,
// an append blob), and returns the lock's name. It makes no request.
func (st Status) QueueCounter() (lock string, ok bool) {
	i := strings.LastIndex(st.Name, queueSuffix+"/"+ticketsPrefix)
	if i <= 0 {
		return "", false
	}
	lock = st.Name[:i]
	if _, ok := parseTickets(lock, st.Name); !ok {
		return "", false
	}
	return lock, true
}
