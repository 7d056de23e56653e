package main

// A fair lock's queue as the command shows it (queue.go): status's lines,
// watch's events, and azlease ui's items, from real waiters on the emulator
// (inside synctest) where it matters.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// TestQueueJSON: status's queue is in ticket order; the first waiter not
// passed over is first in line, and those passed over say so.
func TestQueueJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	got := queueJSON([]azlease.Waiter{
		{Ticket: 3, Holder: "a", Since: t0, Missed: true},
		{Ticket: 5, Holder: "b", Since: t0.Add(time.Second), Head: true},
		{Ticket: 9, Holder: "c"},
	})
	assert.Equal(t, []waiterJSON{
		{Position: 1, Identity: "a", Since: timePtr(t0), Missed: true},
		{Position: 2, Identity: "b", Since: timePtr(t0.Add(time.Second)), FirstInLine: true},
		{Position: 3, Identity: "c"},
	}, got)
	var b strings.Builder
	printQueue(&b, got)
	out := b.String()
	assert.Contains(t, out, "queue\t2 waiting, 1 missed\n") // a missed waiter does not count as waiting
	assert.Contains(t, out, "\t1  a  since 2026-11-24T10:00:00Z")
	assert.Contains(t, out, "missed (passed over until it looks again)")
	assert.Contains(t, out, "\t2  b  since 2026-11-24T10:00:01Z")
	assert.Contains(t, out, "first in line")
	assert.Empty(t, queueJSON(nil))

	// Only a missed waiter left (one killed in the queue): nobody waits,
	// as 'lock --no-wait' finds.
	b.Reset()
	printQueue(&b, queueJSON([]azlease.Waiter{{Ticket: 3, Holder: "a", Since: t0, Missed: true}}))
	assert.Contains(t, b.String(), "queue\t0 waiting, 1 missed\n")
	b.Reset()
	printQueue(&b, queueJSON([]azlease.Waiter{{Ticket: 3, Holder: "a"}}))
	assert.Contains(t, b.String(), "queue\t1 waiting\n")
}

// TestQueueTracker: which polls of a queue print which watch lines.
func TestQueueTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a := azlease.Waiter{Ticket: 1, Holder: "a", Since: at(0)}
	b := azlease.Waiter{Ticket: 2, Holder: "b b", Since: at(1)}
	c := azlease.Waiter{Ticket: 3, Holder: "c", Since: at(5)}
	missed := func(w azlease.Waiter) azlease.Waiter { w.Missed = true; return w }
	q := &queueTracker{name: "jobs"}
	var got []string
	poll := func(s int, holders []string, ws ...azlease.Waiter) {
		for _, e := range q.observe(at(s), ws, holders) {
			got = append(got, e.String())
		}
	}
	poll(2, []string{"h"}, a, b)                                    // the watch begins
	poll(3, []string{"h"}, a, b)                                    // unchanged
	poll(5, []string{"h"}, a, b, c)                                 // c joins
	poll(6, []string{"a"}, b, c)                                    // a served
	poll(8, []string{"a"}, missed(b), c)                            // b passed over
	poll(9, []string{"c"}, missed(b))                               // c served
	poll(10, nil, b)                                                // b back
	poll(12, []string{"x"})                                         // b gone, its take maybe not recorded yet
	poll(13, []string{"x"}, azlease.Waiter{Ticket: 7, Holder: "d"}) // d joins, no since known
	poll(15, nil, azlease.Waiter{Ticket: 7, Holder: "d"})           // b gave up: 3 s and no term of its
	assert.Equal(t, []string{
		"2026-11-24T10:00:02.000Z jobs queue waiting waiter=a position=1 since=2026-11-24T10:00:00.000Z",
		`2026-11-24T10:00:02.000Z jobs queue waiting waiter="b b" position=2 since=2026-11-24T10:00:01.000Z`,
		"2026-11-24T10:00:05.000Z jobs queue joined waiter=c position=3 since=2026-11-24T10:00:05.000Z",
		"2026-11-24T10:00:06.000Z jobs queue served waiter=a since=2026-11-24T10:00:00.000Z",
		`2026-11-24T10:00:08.000Z jobs queue missed waiter="b b" position=1 since=2026-11-24T10:00:01.000Z`,
		"2026-11-24T10:00:09.000Z jobs queue served waiter=c since=2026-11-24T10:00:05.000Z",
		`2026-11-24T10:00:10.000Z jobs queue back waiter="b b" position=1 since=2026-11-24T10:00:01.000Z`,
		"2026-11-24T10:00:13.000Z jobs queue joined waiter=d position=1",
		`2026-11-24T10:00:15.000Z jobs queue left waiter="b b" since=2026-11-24T10:00:01.000Z`,
	}, got)

	// A taker's entry can go before its term is recorded (both are sent
	// together): served at the poll that first reads the term.
	q = &queueTracker{name: "jobs"}
	got = nil
	poll(20, []string{"h"}, a, b)
	poll(21, []string{"h"}, b) // a's entry gone, the lock still names h
	poll(22, []string{"h", "a"}, b)
	assert.Equal(t, []string{
		"2026-11-24T10:00:20.000Z jobs queue waiting waiter=a position=1 since=2026-11-24T10:00:00.000Z",
		`2026-11-24T10:00:20.000Z jobs queue waiting waiter="b b" position=2 since=2026-11-24T10:00:01.000Z`,
		"2026-11-24T10:00:22.000Z jobs queue served waiter=a since=2026-11-24T10:00:00.000Z",
	}, got)

	// JSON: the same fields.
	e := q.observe(at(23), []azlease.Waiter{b, {Ticket: 7, Holder: "d"}, c}, nil)[1]
	j, err := json.Marshal(e)
	require.NoError(t, err)
	assert.JSONEq(t, `{"time":"2026-11-24T10:00:23Z","name":"jobs","queue":"joined","waiter":"c","position":3,"since":"2026-11-24T10:00:05Z"}`, string(j))
}

// TestUIModelQueues: in one listing of a container, the queue of a mutex
// (two waiters behind its holder) and of a semaphore of 2 (one waiter
// behind both slots) are attached to their locks' items (the mutex's, and
// each slot's), first in line first, with their blobs among the item's;
// they are never items of their own, and the lease IDs the waiters
// announced appear nowhere.
func TestUIModelQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := azleasetest.NewServer(t, nil)
		m, err := azlease.NewMutex(srv.Client("holder"), "jobs", &azlease.MutexOptions{Identity: "holder"})
		require.NoError(t, err)
		lk, err := m.Lock(ctx)
		require.NoError(t, err)
		sem := func(id string) *azlease.Semaphore {
			s, err := azlease.NewSemaphore(srv.Client(id), "exports", 2, &azlease.MutexOptions{Identity: id})
			require.NoError(t, err)
			return s
		}
		var held []*azlease.Lock
		for _, id := range []string{"e1", "e2"} {
			l, err := sem(id).Acquire(ctx)
			require.NoError(t, err)
			held = append(held, l)
		}
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, id := range []string{"w1", "w2"} {
			wm, err := azlease.NewMutex(srv.Client(id), "jobs", &azlease.MutexOptions{Identity: id})
			require.NoError(t, err)
			wg.Go(func() { _, _ = wm.Lock(wctx) })
			time.Sleep(time.Second)
		}
		ws := sem("w3")
		wg.Go(func() { _, _ = ws.Acquire(wctx) })
		time.Sleep(time.Second)

		listed, err := azlease.InspectPrefix(ctx, srv.Client("ui"), "")
		require.NoError(t, err)
		model := buildUIModel(listed)
		var names []string
		for _, it := range model.items {
			names = append(names, it.Kind+" "+it.Name)
		}
		assert.ElementsMatch(t, []string{"semaphore-slot exports/slot-0", "semaphore-slot exports/slot-1", "mutex jobs"}, names)

		jobs := itemByName(model, "jobs")
		require.Len(t, jobs.Queue, 2)
		assert.Equal(t, uiWaiter{Position: 1, Identity: "w1", Since: jobs.Queue[0].Since, State: "first in line"}, jobs.Queue[0])
		assert.Equal(t, uiWaiter{Position: 2, Identity: "w2", Since: jobs.Queue[1].Since}, jobs.Queue[1])
		assert.NotNil(t, jobs.Queue[0].Since)
		kinds := map[string]int{}
		for _, b := range jobs.Blobs {
			kinds[b.Kind]++
			assert.Equal(t, jobs.Path, b.Item)
		}
		assert.Equal(t, map[string]int{kindMutex: 1, kindQueueCounter: 1, kindQueueEntry: 2}, kinds)
		for _, slot := range []string{"exports/slot-0", "exports/slot-1"} {
			it := itemByName(model, slot)
			require.Len(t, it.Queue, 1, slot)
			assert.Equal(t, "w3", it.Queue[0].Identity)
			assert.Equal(t, "first in line", it.Queue[0].State)
		}

		// The lease IDs the waiters announced (their entries' metadata) are
		// in no answer.
		var announced []string
		pager := srv.Client("raw").NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, it := range page.Segment.BlobItems {
				for k, v := range it.Metadata {
					if strings.EqualFold(k, "azleasewaiterid") && v != nil {
						announced = append(announced, *v)
					}
				}
			}
		}
		require.Len(t, announced, 3)
		body, err := json.Marshal(struct {
			Items []uiItem
			Blobs []uiBlob
		}{model.items, model.blobs})
		require.NoError(t, err)
		for _, id := range announced {
			assert.NotContains(t, string(body), id)
		}

		cancel()
		wg.Wait()
		for _, l := range held {
			require.NoError(t, l.Unlock(ctx))
		}
		require.NoError(t, lk.Unlock(ctx))
	})
}
