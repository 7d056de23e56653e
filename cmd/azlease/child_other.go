//go:build !unix

package main

import (
	"errors"
	"os"
	"time"
)

// Running a command under a lease needs process groups and a guardian
// process, which azlease implements for Unix systems only. The other
// commands (status, watch, yield, break, reset-once, shards-add,
// shards-remove, ui, emulator, version) work everywhere.

const guardianArg = "__guardian"

var errNoChildren = errors.New("running a command under a lease (lock, lead, once, shards) needs Linux, macOS or another Unix system")

type child struct{ done chan struct{} }

type childResult struct {
	code    int
	started bool
	expired bool
	nostart os.Signal
	stderr  string
	err     *exitError
}

type childOptions struct {
	stop     stopTiming
	tail     int
	testHook string
}

func startChild(argv, env []string, opts childOptions, deadline time.Time) (*child, error) {
	return nil, errNoChildren
}

func (c *child) killGroup() bool { return false }

func (c *child) setDeadline(time.Time) {}
func (c *child) signal(os.Signal)      {}
func (c *child) mayStart()             {}
func (c *child) stop()                 {}
func (c *child) started() bool         { return false }
func (c *child) wait() childResult     { return childResult{} }

func guardianMain([]string) int { return exitUsage }
