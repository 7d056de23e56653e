//go:build !linux

package main

// runAsInit: only Linux containers start azlease as PID 1 of a PID
// namespace; elsewhere azlease never acts as init.
func runAsInit() (code int, ok bool) { return 0, false }
