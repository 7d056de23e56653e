// Command doonce runs a deployment's one-time initialization from several
// processes at once: every copy calls DoOnce with the same key, exactly one
// initializes, and all report it done, by whom and when.
//
//	go run ./examples/doonce                 # 5 copies on the embedded emulator
//	go run ./examples/doonce -copies 3
//	AZURE_STORAGE_CONNECTION_STRING=... go run ./examples/doonce -copies 1
//
// Without a connection string the first process serves azlease's embedded
// emulator on a loopback port and starts the copies as child processes
// pointed at it. With one, it starts the copies against that account; in a
// real deployment each instance simply calls DoOnce at start-up.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The key names the initialization and the deployment it belongs to: a new
// version runs it again, a restart of the same version does not.
const key = "release-2026.11.21/load-reference-data"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "doonce:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("doonce", flag.ContinueOnError)
	copies := fs.Int("copies", 5, "how many processes to start")
	child := fs.String("child", "", "internal: run as the copy with this name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	connStr := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if *child != "" {
		return runCopy(*child, connStr, out)
	}
	if *copies < 1 || *copies > 50 {
		return errors.New("-copies must be from 1 to 50")
	}
	if connStr == "" {
		srv := azleasetest.New(nil)
		ep, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ep.Close()
		defer srv.Close()
		connStr = ep.ConnectionString()
		fmt.Fprintf(out, "embedded emulator at %s\n", ep.URL)
	}
	return startCopies(*copies, connStr, out)
}

// startCopies runs n copies of this program and relays their output.
func startCopies(n int, connStr string, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		name := fmt.Sprintf("copy-%d", i+1)
		cmd := exec.Command(exe, "-child", name)
		cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+connStr)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				mu.Lock()
				fmt.Fprintln(out, sc.Text())
				mu.Unlock()
			}
			errs[i] = cmd.Wait()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runCopy is one process of the deployment.
func runCopy(name, connStr string, out io.Writer) error {
	cc, err := azlease.ContainerClientFromConnectionString(connStr, "deployments", nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := azlease.DoOnce(ctx, cc, key,

		&azlease.DoOnceOptions{Identity: name, PollInterval: 500 * time.Millisecond}, func(ctx context.Context, tok azlease.Token) error {
			fmt.Fprintf(out, "%s: initializing (epoch %d)…\n", name, tok.Epoch)
			select {
			case <-time.After(2 * time.Second):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})

	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	who := res.Status.Holder
	if res.Ran {
		who = "me"
	}
	fmt.Fprintf(out, "%s: %s is done, initialized by %s at %s\n", name, strings.TrimPrefix(key, "release-"), who,
		res.Status.Time.Format(time.TimeOnly))
	return nil
}
