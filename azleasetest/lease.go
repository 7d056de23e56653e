package azleasetest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/azlease/azlease/internal/azname"
)

type leaseState int

const (
	available leaseState = iota
	leased
	expired
	breaking
	broken
)

func (s leaseState) String() string {
	return [...]string{"available", "leased", "expired", "breaking", "broken"}[s]
}

// leaseRecord is the stored lease of a blob. Expiry is lazy: effective
// derives the state at a given server time.
type leaseRecord struct {
	state    leaseState
	id       string    // canonical lower-case GUID
	duration int       // seconds; -1 is infinite
	expires  time.Time // fixed leases: when leased becomes expired
	breakAt  time.Time // breaking: when it becomes broken
}

func (l leaseRecord) effective(now time.Time) leaseRecord {
	switch {
	case l.state == leased && l.duration >= 0 && !now.Before(l.expires):
		l.state = expired
	case l.state == breaking && !now.Before(l.breakAt):
		l.state = broken
	}
	return l
}

// leaseProps is a lease as Get Blob Properties and List Blobs report it.
type leaseProps struct {
	state    string // available, leased, expired, breaking, broken
	status   string // locked, unlocked
	duration string // fixed, infinite; "" unless leased
}

// leasePropsAt reports lease l as it is in effect at now (server time): an
// expired lease reads expired, a breaking lease whose period passed reads
// broken, whatever the stored record says.
func leasePropsAt(l leaseRecord, now time.Time) leaseProps {
	l = l.effective(now)
	p := leaseProps{state: l.state.String(), status: "unlocked"}
	if l.state == leased || l.state == breaking {
		p.status = "locked"
	}
	if l.state == leased {
		p.duration = "fixed"
		if l.duration < 0 {
			p.duration = "infinite"
		}
	}
	return p
}

// Grant is one interval during which the server held a lease on a blob for
// one lease ID: the server's truth, against which [Server.CheckExclusive]
// checks what clients believed.
type Grant struct {
	// LeaseID is the lease ID, in lower case.
	LeaseID string
	// Holder is the name of the client ([Server.Client]) whose request
	// started the grant: it acquired the lease, renewed it after it had
	// expired, or changed its ID. "" over HTTP.
	Holder string
	// Start is the local time the server granted the lease.
	Start time.Time
	// End is the local time the lease ended, or will end if nobody renews,
	// releases or breaks it. The zero time means an infinite lease.
	End time.Time
}

// grant is a Grant as recorded: an end that comes from the lease's own
// expiry (or a break period) is kept in server time, and converted to local
// time when read, through the clock rate in force at that server instant.
type grant struct {
	leaseID   string
	holder    string
	start     time.Time // local
	endLocal  time.Time // local, for ends that happened at a request
	endServer time.Time // server, for expiries and break periods
	infinite  bool
}

// History returns the lease grants on blob in [Container]: see
// [Server.Grants].
func (s *Server) History(blob string) []Grant {
	return s.Grants(Container, blob)
}

// Grants returns the lease intervals the server has granted on a blob,
// oldest first, in local time, also for a blob since deleted. A renewal
// extends the current grant; a lease acquired again after it expired, or
// renewed after it expired, starts a new grant, and so does a change of
// lease ID. The last grant's End is when the lease will expire if nobody
// renews it.
func (s *Server) Grants(container, blob string) []Grant {
	if !s.usable() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := s.grants[container+"/"+blob]
	out := make([]Grant, len(gs))
	for i, g := range gs {
		out[i] = Grant{LeaseID: g.leaseID, Holder: g.holder, Start: g.start}
		switch {
		case !g.endLocal.IsZero():
			out[i].End = g.endLocal
		case !g.infinite:
			out[i].End = s.localAt(g.endServer)
		}
	}
	return out
}

// setEnd records when a lease ends: its expiry (or break) as the server will
// see it, or, when it ends now, the local time of the request.
func (g *grant) setEnd(l leaseRecord, now, localNow time.Time) {
	g.endLocal, g.endServer, g.infinite = time.Time{}, time.Time{}, false
	var at time.Time
	switch l.state {
	case breaking:
		at = l.breakAt
	case leased:
		if l.duration < 0 {
			g.infinite = true
			return
		}
		at = l.expires
	}
	if at.After(now) {
		g.endServer = at
	} else {
		g.endLocal = localNow // broken, released, or at its end already
	}
}

func (s *Server) current(b *blobState) *grant {
	gs := s.grants[b.key]
	if len(gs) == 0 {
		return nil
	}
	return &gs[len(gs)-1]
}

// openGrant records a new lease interval starting now, ending the previous
// one now if it had not ended.
func (s *Server) openGrant(b *blobState, now time.Time) {
	if g := s.current(b); g != nil && (g.infinite || (g.endLocal.IsZero() && g.endServer.After(now))) {
		g.endLocal, g.endServer, g.infinite = s.localNow, time.Time{}, false
	}
	g := grant{leaseID: b.lease.id, holder: s.client, start: s.localNow}
	g.setEnd(b.lease, now, s.localNow)
	s.grants[b.key] = append(s.grants[b.key], g)
}

// setGrantEnd moves the end of the current grant to where lease l ends.
func (s *Server) setGrantEnd(b *blobState, l leaseRecord, now time.Time) {
	if g := s.current(b); g != nil {
		g.setEnd(l, now, s.localNow)
	}
}

// endGrantNow ends the current grant at the request being handled.
func (s *Server) endGrantNow(b *blobState) {
	if g := s.current(b); g != nil {
		g.endLocal, g.endServer, g.infinite = s.localNow, time.Time{}, false
	}
}

func (s *Server) leaseOp(b *blobState, req *request, now time.Time) *result {
	if res := s.checkConditions(req.Header, b, true); res != nil {
		return res
	}
	l := b.lease.effective(now)
	id, res := s.leaseIDHeader(req.Header, "x-ms-lease-id", req.Op != OpAcquireLease && req.Op != OpBreakLease)
	if res != nil {
		return res
	}
	switch req.Op {
	case OpAcquireLease:
		return s.acquire(b, l, req, now)
	case OpRenewLease:
		return s.renew(b, l, id, now)
	case OpChangeLease:
		return s.change(b, l, id, req, now)
	case OpReleaseLease:
		return s.release(b, l, id, now)
	default:
		return s.breakLease(b, l, req, now)
	}
}

func (s *Server) acquire(b *blobState, l leaseRecord, req *request, now time.Time) *result {
	ds := req.Header.Get("x-ms-lease-duration")
	if ds == "" {
		return s.fail(http.StatusBadRequest, "MissingRequiredHeader", "")
	}
	d, err := strconv.Atoi(ds)
	if err != nil || (d != -1 && (d < 15 || d > 60)) {
		return s.fail(http.StatusBadRequest, "InvalidHeaderValue", "")
	}
	proposed, res := s.leaseIDHeader(req.Header, "x-ms-proposed-lease-id", false)
	if res != nil {
		return res
	}
	if proposed == "" {
		proposed = newGUID(s.seq)
	}
	switch l.state {
	case leased:
		if proposed != l.id {
			return s.fail(http.StatusConflict, "LeaseAlreadyPresent", "")
		}
		// Same ID: the lease continues with the new duration.
		b.lease = leaseRecord{state: leased, id: proposed, duration: d, expires: expiry(now, d)}
		s.setGrantEnd(b, b.lease, now)
	case breaking:
		if proposed == l.id {
			return s.fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeAcquired", "")
		}
		return s.fail(http.StatusConflict, "LeaseAlreadyPresent", "")
	default: // available, expired, broken
		b.lease = leaseRecord{state: leased, id: proposed, duration: d, expires: expiry(now, d)}
		s.openGrant(b, now)
	}
	return s.leaseOK(http.StatusCreated, b, b.lease.id)
}

func (s *Server) renew(b *blobState, l leaseRecord, id string, now time.Time) *result {
	if id != l.id || l.state == available {
		return s.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation", "")
	}
	switch l.state {
	case breaking, broken:
		return s.fail(http.StatusConflict, "LeaseIsBrokenAndCannotBeRenewed", "")
	case expired:
		// Renewable because nobody leased or modified the blob since it
		// expired (a write makes it available): a new interval begins.
		b.lease = leaseRecord{state: leased, id: id, duration: l.duration, expires: expiry(now, l.duration)}
		s.openGrant(b, now)
	default:
		b.lease = leaseRecord{state: leased, id: id, duration: l.duration, expires: expiry(now, l.duration)}
		s.setGrantEnd(b, b.lease, now)
	}
	return s.leaseOK(http.StatusOK, b, id)
}

func (s *Server) change(b *blobState, l leaseRecord, id string, req *request, now time.Time) *result {
	proposed, res := s.leaseIDHeader(req.Header, "x-ms-proposed-lease-id", true)
	if res != nil {
		return res
	}
	switch l.state {
	case leased:
		switch l.id {
		case id:
			b.lease.id = proposed
			if proposed != id {
				s.openGrant(b, now) // the same lease under a new ID
			}
		case proposed: // (B)→(A) on Leased(A): a retried change that already happened
		default:
			return s.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation", "")
		}
		return s.leaseOK(http.StatusOK, b, b.lease.id)
	case breaking:
		// Azure's text for this code: "The lease ID matched, but the lease
		// is currently in breaking state". A wrong ID is a mismatch.
		if id != l.id && proposed != l.id {
			return s.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation", "")
		}
		return s.fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeChanged", "")
	default:
		return s.fail(http.StatusConflict, "LeaseNotPresentWithLeaseOperation", "")
	}
}

func (s *Server) release(b *blobState, l leaseRecord, id string, now time.Time) *result {
	if l.state == available || id != l.id {
		return s.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation", "")
	}
	if l.state == leased || l.state == breaking {
		s.endGrantNow(b)
	}
	b.lease = leaseRecord{}
	return s.leaseOK(http.StatusOK, b, "")
}

func (s *Server) breakLease(b *blobState, l leaseRecord, req *request, now time.Time) *result {
	period := -1
	if ps := req.Header.Get("x-ms-lease-break-period"); ps != "" {
		p, err := strconv.Atoi(ps)
		if err != nil || p < 0 || p > 60 {
			return s.fail(http.StatusBadRequest, "InvalidHeaderValue", "")
		}
		period = p
	}
	var at time.Time
	switch l.state {
	case available:
		return s.fail(http.StatusConflict, "LeaseNotPresentWithLeaseOperation", "")
	case leased:
		switch {
		case l.duration < 0 && period < 0:
			at = now
		case period < 0:
			at = l.expires
		default:
			at = now.Add(time.Duration(period) * time.Second)
			if l.duration >= 0 && l.expires.Before(at) {
				at = l.expires // the break period is used only if shorter
			}
		}
	case breaking:
		at = l.breakAt
		if p := now.Add(time.Duration(period) * time.Second); period >= 0 && p.Before(at) {
			at = p
		}
	default: // expired, broken
		at = now
	}
	wasHeld := l.state == leased || l.state == breaking
	if at.After(now) {
		b.lease = leaseRecord{state: breaking, id: l.id, duration: l.duration, breakAt: at}
	} else {
		b.lease = leaseRecord{state: broken, id: l.id, duration: l.duration}
	}
	if wasHeld {
		s.setGrantEnd(b, b.lease, now)
	}
	res := s.leaseOK(http.StatusAccepted, b, "")
	secs := int(math.Ceil(at.Sub(now).Seconds()))
	res.header.Set("x-ms-lease-time", strconv.Itoa(secs))
	return res
}

func (s *Server) leaseOK(status int, b *blobState, id string) *result {
	h := stamp(b.etag, b.lastModified) // lease operations change neither
	if id != "" {
		h.Set("x-ms-lease-id", id)
	}
	return &result{status: status, header: h, applied: true}
}

func expiry(now time.Time, d int) time.Time {
	if d < 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(d) * time.Second)
}

// leaseIDHeader reads and validates a lease ID header. Lease IDs are GUIDs in
// any of the usual formats; they compare case-insensitively.
func (s *Server) leaseIDHeader(h http.Header, name string, required bool) (string, *result) {
	v := h.Get(name)
	if v == "" {
		if required {
			return "", s.fail(http.StatusBadRequest, "MissingRequiredHeader", "")
		}
		return "", nil
	}
	id, ok := azname.GUID(v)
	if !ok {
		return "", s.fail(http.StatusBadRequest, "InvalidHeaderValue", "")
	}
	return id, nil
}

// checkWriteLease applies Azure's rules for writes to a blob that may be
// leased (Put Blob, Set Blob Metadata, Delete Blob).
func (s *Server) checkWriteLease(b *blobState, req *request, now time.Time) *result {
	id, res := s.leaseIDHeader(req.Header, "x-ms-lease-id", false)
	if res != nil {
		return res
	}
	l := b.lease.effective(now)
	switch l.state {
	case available:
		if id != "" {
			return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
		}
	case leased, breaking:
		if id == "" {
			return s.fail(http.StatusPreconditionFailed, "LeaseIdMissing", "")
		}
		if id != l.id {
			return s.fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation", "")
		}
	case expired:
		if id == l.id {
			return s.fail(http.StatusPreconditionFailed, "LeaseLost", "")
		}
		if id != "" {
			return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
		}
	case broken:
		if id != "" {
			return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
		}
	}
	return nil
}

// checkReadLease applies the rules for reads that name a lease ID; reads
// without one always succeed.
func (s *Server) checkReadLease(b *blobState, req *request, now time.Time) *result {
	id, res := s.leaseIDHeader(req.Header, "x-ms-lease-id", false)
	if res != nil || id == "" {
		return res
	}
	l := b.lease.effective(now)
	switch l.state {
	case leased, breaking:
		if id != l.id {
			return s.fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation", "")
		}
	case expired:
		if id == l.id {
			return s.fail(http.StatusPreconditionFailed, "LeaseLost", "")
		}
		return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
	default:
		return s.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation", "")
	}
	return nil
}

// newGUID makes the lease ID the server chooses when the client proposes
// none; seq makes it unique within the server.
func newGUID(seq uint64) string {
	return fmt.Sprintf("5e7f0000-0000-4000-8000-%012x", seq)
}

// Break breaks the lease on blob in [Container] at once, as an operator does
// with a break period of 0 (az storage blob lease break): its holder learns
// only at its next request that it lost it, and anyone can acquire it now.
// It returns an error if the blob does not exist or has no lease.
func (s *Server) Break(blob string) error {
	if !s.usable() {
		return errNotCreated
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[Container]
	if !ok {
		return fmt.Errorf("azleasetest: Break: no container %q", Container)
	}
	b, ok := c.blobs[blob]
	if !ok {
		return fmt.Errorf("azleasetest: Break: no blob %q", blob)
	}
	s.seq++
	s.localNow, s.client = time.Now(), ""
	now := s.clock.at(s.localNow)
	req := &request{Request: Request{Op: OpBreakLease, Container: Container, Blob: blob,
		Header: http.Header{"X-Ms-Lease-Break-Period": {"0"}}}}
	if res := s.breakLease(b, b.lease.effective(now), req, now); res.status != http.StatusAccepted {
		return fmt.Errorf("azleasetest: Break: blob %q has no lease", blob)
	}
	return nil
}
