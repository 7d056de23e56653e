package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease"
)

// TestClassify: every kind of library error has its documented status, and
// the message is one line without a repeated "azlease:" prefix.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", azlease.ErrInvalidOptions), exitUsage},
		{fmt.Errorf("x: %w", azlease.ErrLeaseBroken), exitLost},
		{fmt.Errorf("x: %w", azlease.ErrDeadlinePassed), exitLost},
		{fmt.Errorf("x: %w", azlease.ErrPermanent), exitRefused},
		{fmt.Errorf("x: %w", azlease.ErrTransient), exitUnavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), exitUnavailable},
		{fmt.Errorf("x: %w", azlease.ErrLeaseHeld), exitNotAcquired},
		{&azlease.OnceFailedError{Key: "k", Attempts: 3}, exitOnceFailed},
		{exitf(42, "mine"), 42},
		{errors.New("something else"), exitInternal},
	} {
		got := classify("lock x", tc.err)
		assert.Equal(t, tc.want, got.code, "%v", tc.err)
		assert.NotContains(t, got.msg, "\n")
	}
	assert.Nil(t, classify("x", nil))
	assert.Equal(t, "lease lost: broken; second line", line(fmt.Errorf("azlease: %w\nsecond   line", azlease.ErrLeaseBroken)))
}
