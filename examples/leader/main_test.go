package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLeader(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var log bytes.Buffer
	if err := run(context.Background(), []string{"-run-for", "6s", "-health", "127.0.0.1:0"}, &log); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"became leader", "housekeeping epoch=", "housekeeping stopped", "azlease: stepping down"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
