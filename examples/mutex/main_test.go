package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMutexExample(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "12 entries, none lost:") || strings.Count(out.String(), "\n") != 13 {
		t.Errorf("unexpected output:\n%s", out.String())
	}
}
