package shards

// The replica's health: Check's verdict for liveness probes, and the
// episodes of failures the replica logs once each (when they begin, and
// when they end).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/azlease/azlease"
)

// Check reports the replica's health, for liveness probes. It fails when
// the group is not running (with why it stopped, if it stopped on its own),
// and when no listing has succeeded for longer than the lease duration
// plus ListInterval (counted from the start until the first listing
// succeeds), with the last listing's error. A replica lists at least every
// ListInterval: a lease duration past that, a replica cut off from storage
// has lost its membership and its shards (azlease's Elector.Check fails
// after a lease duration without an answer).
func (g *Group) Check() error {
	if err := g.initErr(); err != nil {
		return err
	}
	select {
	case <-g.done:
		if err := g.Err(); err != nil {
			return fmt.Errorf("azlease/shards: stopped: %w", err)
		}
		return errors.New("azlease/shards: stopped")
	default:
	}
	g.mu.Lock()
	started, startedAt, listedAt, listErr := g.started, g.startedAt, g.listedAt, g.listErr
	g.mu.Unlock()
	if !started {
		return errors.New("azlease/shards: not started")
	}
	return listingHealth(time.Now(), startedAt, listedAt, listErr, g.cfg.duration+g.cfg.list)
}

// listingHealth is Check's verdict on the listings at now: an error when
// none has succeeded for longer than limit, counted from start until the
// first one did.
func listingHealth(now, start, listed time.Time, last error, limit time.Duration) error {
	var msg string
	switch {
	case listed.IsZero() && now.Sub(start) > limit:
		msg = fmt.Sprintf("azlease/shards: no listing of the group has succeeded since the replica started %v ago", now.Sub(start).Round(time.Millisecond))
	case !listed.IsZero() && now.Sub(listed) > limit:
		msg = fmt.Sprintf("azlease/shards: no successful listing of the group for %v", now.Sub(listed).Round(time.Millisecond))
	default:
		return nil
	}
	if last != nil {
		return fmt.Errorf("%s; last error: %w", msg, last)
	}
	return errors.New(msg)
}

// failuresBeforeWarning is how many transient failures in a row begin an
// episode worth a Warn: one or two are retried quietly.
const failuresBeforeWarning = 3

// episode follows a run of failures of one kind (the listings, the shard
// acquisitions storage refuses), so that it is logged once: at Warn after
// failuresBeforeWarning transient failures in a row, at Error at once when
// storage refuses for good (and again at Error if an episode logged at
// Warn turns into refusals), and its end at Info.
type episode struct {
	streak   int
	since    time.Time
	any      bool       // it was logged
	reported slog.Level // at this level
}

// episodeLog is what to log about one outcome: nothing unless due.
type episodeLog struct {
	due    bool
	level  slog.Level
	streak int
	since  time.Time
}

// failed records a failure, and says what to log.
func (e *episode) failed(err error) episodeLog {
	e.streak++
	if e.streak == 1 {
		e.since = time.Now()
	}
	level := slog.LevelWarn
	if errors.Is(err, azlease.ErrPermanent) {
		level = slog.LevelError
	} else if e.streak < failuresBeforeWarning {
		return episodeLog{}
	}
	if e.any && e.reported >= level {
		return episodeLog{}
	}
	e.any, e.reported = true, level
	return episodeLog{due: true, level: level, streak: e.streak, since: e.since}
}

// succeeded ends the episode, and says what to log.
func (e *episode) succeeded() episodeLog {
	r := episodeLog{due: e.any, level: slog.LevelInfo, streak: e.streak, since: e.since}
	*e = episode{}
	return r
}

// log logs the beginning of an episode of failures of what ("listing the
// group").
func (r episodeLog) log(l *slog.Logger, what string, err error, attrs ...slog.Attr) {
	if !r.due {
		return
	}
	msg := "azlease/shards: " + what + " fails; retrying at every poll"
	if r.level >= slog.LevelError {
		msg = "azlease/shards: storage refuses " + what + " (check the role or SAS's permissions); retrying at every poll"
	}
	attrs = append(attrs, slog.Int("failed_in_a_row", r.streak), slog.Any("error", err))
	l.LogAttrs(context.Background(), r.level, msg, attrs...)
}

// logEnd logs the end of an episode.
func (r episodeLog) logEnd(l *slog.Logger, what string) {
	if !r.due {
		return
	}
	l.Info("azlease/shards: "+what+" succeeds again",
		slog.Int("failed_in_a_row", r.streak), slog.Duration("after", time.Since(r.since).Round(time.Millisecond)))
}
