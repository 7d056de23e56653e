package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain doubles as the copies' main: the example starts its copies with
// os.Executable, which under `go test` is this test binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "-child" {
		if err := run(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestDoOnceExample starts four real processes on the embedded emulator:
// exactly one initializes and all four report it done.
func TestDoOnceExample(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var out bytes.Buffer
	if err := run([]string{"-copies", "4"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if n := strings.Count(s, "initializing"); n != 1 {
		t.Errorf("%d copies initialized:\n%s", n, s)
	}
	if n := strings.Count(s, "initialized by me"); n != 1 {
		t.Errorf("%d copies ran it:\n%s", n, s)
	}
	if n := strings.Count(s, "is done"); n != 4 {
		t.Errorf("%d copies reported done:\n%s", n, s)
	}
}
