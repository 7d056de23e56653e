package azlease

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGoroutineID(t *testing.T) {
	id := goroutineID()
	require.NotZero(t, id)
	assert.Equal(t, id, goroutineID(), "stable on one goroutine")
	other := make(chan uint64)
	for range 3 {
		go func() { other <- goroutineID() }()
		o := <-other
		assert.NotZero(t, o)
		assert.NotEqual(t, id, o, "another goroutine has another id")
	}
	synctest.Test(t, func(t *testing.T) {
		assert.NotZero(t, goroutineID(), "inside a synctest bubble too")
	})
}
