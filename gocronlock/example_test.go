package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/gocronlock"
)

// Three replicas of a service schedule the same job; each tick runs on one
// of them. (Here the replicas are three schedulers in one process on the
// embedded emulator; in a service each replica runs this code with its own
// container client.)
func ExampleLocker() {
	srv := azleasetest.New(nil)
	defer srv.Close()
	var runs atomic.Int32
	var schedulers []gocron.Scheduler
	for _, replica := range []string{"a", "b", "c"} {
		locker, err := gocronlock.NewLocker(srv.Client(replica), &gocronlock.Options{
			Period: time.Hour,
			Once:   &azlease.DoOnceOptions{Identity: replica},
		})
		if err != nil {
			panic(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			panic(err)
		}
		// An hourly job on the hour: locker.StartAt() aligns it on the
		// ticks. Here it also runs at once, for the example: the three
		// replicas fire for the same tick, the hour nearest to now.
		_, err = s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { runs.Add(1) }),
			gocron.WithName("hourly-report"), gocron.WithStartAt(gocron.WithStartImmediately()))
		if err != nil {
			panic(err)
		}
		s.Start()
		schedulers = append(schedulers, s)
	}
	time.Sleep(time.Second)
	for _, s := range schedulers {
		_ = s.Shutdown()
	}
	fmt.Println("runs:", runs.Load())
	// Output: runs: 1
}

// The Elector adapter: the replica that leads runs every job.
func ExampleElector() {
	srv := azleasetest.New(nil)
	defer srv.Close()
	ctx := context.Background()
	e, err := azlease.NewElector(srv.Client("a"), "jobs-leader", nil)
	if err != nil {
		panic(err)
	}
	if err := e.Start(ctx, gocronlock.Lead); err != nil { // hold leadership while running
		panic(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	for !e.IsLeader() { // for the example: this replica is alone, and leads at once
		time.Sleep(10 * time.Millisecond)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(gocronlock.NewElector(e)))
	if err != nil {
		panic(err)
	}
	ran := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() { close(ran) }),
		gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		panic(err)
	}
	s.Start()
	<-ran
	_ = s.Shutdown()
	fmt.Println("the leader ran the job;", errors.Is(gocronlock.NewElector(nil).IsLeader(ctx), gocronlock.ErrNotLeader))
	// Output: the leader ran the job; true
}
