package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// guardianAttr: the guardian gets SIGTERM when azlease dies, and then kills
// CMD's group (it acts on it only if its parent has changed).
func guardianAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// commandAttr: CMD leads a new process group (in the terminal's foreground
// if fg), and dies with SIGKILL if the guardian dies.
func commandAttr(fg bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: 0, Pdeathsig: syscall.SIGKILL}
}

// waitExited returns when CMD has exited, leaving it unreaped: as a zombie it
// keeps its process group ID reserved, so signals to the group cannot reach
// an unrelated group that reused the number.
func waitExited(cmd *exec.Cmd) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != syscall.EINTR {
			return
		}
	}
}

// groupLeftovers reports whether a live process other than its (exited)
// leader is in process group pgid, from /proc.
func groupLeftovers(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == pgid {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold anything, so
		// parse after its last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if state := f[0]; len(state) == 1 && (state[0] == 'Z' || state[0] == 'X') {
			continue
		}
		if pg, err := strconv.Atoi(string(f[2])); err == nil && pg == pgid {
			return true
		}
	}
	return false
}
