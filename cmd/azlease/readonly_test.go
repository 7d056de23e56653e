//go:build linux

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// TestReadOnlyRole is issue 24's item 6 for the commands: an identity whose
// role may read and list blobs but not lease or write them (Storage Blob
// Data Reader). lead, lock (one slot and several), once and status see the
// lock blobs; every command that must hold one exits 77 at once with one
// line naming the missing permission, where lead used to follow for ever,
// silent. The emulator, in this test binary, refuses per operation as Azure
// does (403 AuthorizationPermissionMismatch).
func TestReadOnlyRole(t *testing.T) {
	t.Parallel()
	srv := azleasetest.New(nil)
	t.Cleanup(srv.Close)
	ep, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Close() })
	w := &world{t: t, conn: ep.ConnectionString(), container: "readonly", dir: t.TempDir()}
	// An operator made the container and the lock blobs.
	cc, err := srv.ContainerClient(w.container, "setup")
	require.NoError(t, err)
	for _, name := range []string{"leader", "job", "pool/slot-0", "pool/slot-1", "pool/slot-2", "once/migrate"} {
		l, err := azlease.NewLease(cc, name, nil)
		require.NoError(t, err)
		_, err = l.Acquire(context.Background())
		require.NoError(t, err)
		require.NoError(t, l.Release(context.Background()))
	}
	srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
		switch r.Op {
		case azleasetest.OpGetProperties, azleasetest.OpGetBlob, azleasetest.OpGetMetadata,
			azleasetest.OpListBlobs, azleasetest.OpGetContainerProperties:
			return azleasetest.Fault{}
		}
		return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: string(bloberror.AuthorizationPermissionMismatch)}
	})

	for _, args := range [][]string{
		{"lead", "leader", "--", "true"},
		{"lock", "job", "--", "true"},
		{"lock", "-n", "3", "pool", "--", "true"},
		{"once", "migrate", "--", "true"},
	} {
		t.Run(args[0]+" "+args[len(args)-3], func(t *testing.T) {
			start := time.Now()
			p := w.run(time.Minute, args...)
			assert.Equal(t, exitRefused, p.status(), "stderr: %s", p.stderr())
			msg := oneLine(t, p)
			assert.Contains(t, msg, "AuthorizationPermissionMismatch")
			assert.Contains(t, msg, "Storage Blob Data Contributor", "names the missing permission")
			assert.Less(t, time.Since(start), 20*time.Second, "at once, not after polls")
		})
	}
	p := w.run(time.Minute, "status", "leader")
	assert.Equal(t, 0, p.status(), "status only reads: stderr %s", p.stderr())
}
