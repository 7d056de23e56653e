package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusalHandler: the library's Error record of a permanent refusal is
// held for refusalGrace: dropped when the command exits reporting the
// refusal itself (77, one line), printed after the grace when the command
// goes on, and printed at exit for any other outcome. Other records pass
// at once.
func TestRefusalHandler(t *testing.T) {
	refused := fmt.Errorf("acquire: %w", azlease.ErrPermanent)
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		drop  bool
		wants int // refusal records printed in the end
	}{
		{"exits 77 at once", 0, true, 0},
		{"exits otherwise", 0, false, 1},
		{"goes on", 3 * time.Second, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var out syncBuffer
				h := newRefusalHandler(slog.NewTextHandler(&out, nil))
				log := slog.New(h).With(slog.String("blob", "x"))
				log.Error("azlease: storage refuses requests", slog.Any("error", refused))
				log.Warn("azlease: something else")
				log.Error("azlease: not a refusal", slog.Any("error", fmt.Errorf("other")))
				assert.NotContains(t, out.String(), "refuses", "held")
				assert.Contains(t, out.String(), "something else")
				assert.Contains(t, out.String(), "not a refusal")
				time.Sleep(tc.wait)
				if tc.wait > 0 {
					// A second refusal, after the first was printed: held
					// anew, and printed after its own grace.
					log.Error("azlease: storage refuses requests", slog.Any("error", refused))
					time.Sleep(tc.wait)
					tc.wants++
				}
				h.hold.finish(tc.drop)
				assert.Equal(t, tc.wants, strings.Count(out.String(), "storage refuses requests"), out.String())
				if tc.wants > 0 {
					assert.Contains(t, out.String(), "blob=x", "with the attributes of the logger it came through")
				}
			})
		})
	}
}
