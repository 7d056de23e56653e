package hostinfo

import (
	"os"
	"testing"
)

// TestCPUModel: on Linux the model comes from /proc/cpuinfo; elsewhere it
// says it does not know.
func TestCPUModel(t *testing.T) {
	got := CPUModel()
	if _, err := os.Stat("/proc/cpuinfo"); err != nil {
		if got != "unknown CPU" {
			t.Fatalf("CPUModel() = %q without /proc/cpuinfo", got)
		}
		return
	}
	if got == "" {
		t.Fatal("CPUModel() is empty")
	}
}
