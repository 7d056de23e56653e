package azleasetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { azurite.StopShared() }))
}

// Lease IDs used by the cases. "-" in a step means no lease ID.
var ids = map[string]string{
	"A": "aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa",
	"B": "bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb",
	"C": "cccccccc-3333-4333-8333-cccccccccccc",
	// "a" is A in upper case: GUIDs compare case-insensitively on Azure.
	"a": "AAAAAAAA-1111-4111-8111-AAAAAAAAAAAA",
}

// step is one operation of a conformance case and its expected answer: "ok",
// an x-ms-error-code, or for "state" the lease state. azurite, when set, is
// Azurite's different answer, and why is the documented difference.
type step struct {
	// op is one of: acquire:ID:secs, raw-acquire:anything:secs, renew:ID,
	// release:ID, change:FROM:TO, break:secs|nil, write:ID|-,
	// write-stale-etag:ID, delete:ID|-, read:ID|-, createIfAbsent,
	// other-container-acquire, state, duration, sleep:dur,
	// etag:mark|same|changed; and for List Blobs: use:NAME (later steps
	// act on the blob NAME under the case's prefix), put:NAME[:k=v,…],
	// write-size:ID|-:N and put-size:N (metadata of N bytes, names and
	// values, set under the lease or put on a new blob),
	// list:PREFIX:MAX (names page by page, "a b | c"; MAX empty: the
	// server's default), list-states:PREFIX, list-meta:PREFIX,
	// list-props:NAME, list-types:PREFIX (name=BlobType …),
	// other-container-list; and for append blobs: create-append (Put Blob
	// of an empty append blob, only if absent), append:DATA,
	// append-pos:POS:DATA, append-max:MAX:DATA, append-lease:ID:DATA
	// (answered "ok@OFFSET#COUNT": x-ms-blob-append-offset and
	// x-ms-blob-committed-block-count), append-many:N (N one-byte appends,
	// 32 at a time), append-race:N (N appends of 8 distinct bytes at once:
	// "ok" when every offset answered is distinct and reads back its own
	// bytes), append-props (type, length, committed blocks), read-all and
	// read-range:START:COUNT (COUNT 0: to the end; answered with the bytes
	// quoted and Content-Range).
	op      string
	want    string
	azurite string
	why     string
}

type conformanceCase struct {
	name   string
	noBlob bool // do not create the blob first
	steps  []step
}

// cases follow the outcome tables of the Lease Blob REST reference: lease
// actions by state, and reads and writes by state.
var cases = []conformanceCase{
	{name: "acquire-available", steps: []step{
		{op: "state", want: "available"},
		{op: "acquire:A:15", want: "ok"},
		{op: "state", want: "leased"},
		{op: "acquire:B:15", want: "LeaseAlreadyPresent"},
		{op: "acquire:A:30", want: "ok"}, // same ID: idempotent, new duration
		{op: "sleep:20s"},
		{op: "state", want: "leased"},
	}},
	{name: "renew-release-by-id", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "renew:A", want: "ok"},
		{op: "renew:B", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "release:B", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "release:A", want: "ok"},
		{op: "state", want: "available"},
		{op: "release:A", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "change:A:B", want: "LeaseNotPresentWithLeaseOperation"},
		{op: "break:0", want: "LeaseNotPresentWithLeaseOperation"},
		{op: "acquire:B:15", want: "ok"},
	}},
	{name: "change", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "change:B:C", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "change:A:B", want: "ok"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "renew:B", want: "ok"},
		{op: "change:A:B", want: "ok"}, // a retried change that already happened
		{op: "write:A", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "write:B", want: "ok"},
		{op: "release:B", want: "ok"},
	}},
	{name: "expiry-then-other-acquires", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:14s"},
		{op: "state", want: "leased"},
		{op: "sleep:2s"},
		{op: "state", want: "expired"},
		{op: "acquire:B:15", want: "ok"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "write:A", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "release:A", want: "LeaseIdMismatchWithLeaseOperation"},
	}},
	{name: "renew-after-expiry-untouched", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "state", want: "expired"},
		{op: "renew:A", want: "ok"},
		{op: "state", want: "leased"},
		{op: "release:A", want: "ok"},
	}},
	{name: "renew-after-expiry-and-write", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "write:-", want: "ok"}, // a write without a lease makes it available
		{op: "state", want: "available"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation"},
	}},
	{name: "expired-foreign-ids", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "write:A", want: "LeaseLost", azurite: "LeaseNotPresentWithBlobOperation",
			why: "Azure documents LeaseLost for a write with an expired lease ID; Azurite answers LeaseNotPresentWithBlobOperation"},
		{op: "write:B", want: "LeaseNotPresentWithBlobOperation"},
		{op: "release:B", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "change:B:C", want: "LeaseNotPresentWithLeaseOperation"},
		{op: "renew:B", want: "LeaseIdMismatchWithLeaseOperation", azurite: "ok",
			why: "Azure fails Renew (B) on Expired (A); Azurite's expired state does not check the ID and revives A's lease"},
	}},
	{name: "release-and-reacquire-after-expiry", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "release:A", want: "ok"},
		{op: "state", want: "available"},
	}},
	{name: "break-with-period", steps: []step{
		{op: "acquire:A:60", want: "ok"},
		{op: "break:5", want: "ok"},
		{op: "state", want: "breaking"},
		{op: "acquire:B:15", want: "LeaseAlreadyPresent"},
		{op: "acquire:A:15", want: "LeaseIsBreakingAndCannotBeAcquired"},
		{op: "renew:A", want: "LeaseIsBrokenAndCannotBeRenewed"},
		{op: "change:A:B", want: "LeaseIsBreakingAndCannotBeChanged"},
		{op: "release:B", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "write:A", want: "ok"},
		{op: "write:-", want: "LeaseIdMissing"},
		{op: "break:30", want: "ok"}, // the shorter remaining period wins
		{op: "sleep:6s"},
		{op: "state", want: "broken"},
		{op: "acquire:B:15", want: "ok"},
	}},
	{name: "break-immediately", steps: []step{
		{op: "acquire:A:60", want: "ok"},
		{op: "break:0", want: "ok"},
		{op: "state", want: "broken"},
		{op: "renew:A", want: "LeaseIsBrokenAndCannotBeRenewed"},
		{op: "change:A:B", want: "LeaseNotPresentWithLeaseOperation"},
		{op: "break:0", want: "ok"}, // idempotent
		{op: "write:A", want: "LeaseNotPresentWithBlobOperation"},
		{op: "release:A", want: "ok"},
		{op: "state", want: "available"},
	}},
	{name: "break-shortens-and-natural", steps: []step{
		{op: "acquire:A:20", want: "ok"},
		{op: "break:nil", want: "ok"}, // a fixed lease breaks when it would expire
		{op: "state", want: "breaking"},
		{op: "break:0", want: "ok"},
		{op: "state", want: "broken"},
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "break:10", want: "ok"}, // break on expired: broken at once
		{op: "state", want: "broken"},
	}},
	{name: "write-without-lease-on-broken", steps: []step{
		{op: "acquire:A:60", want: "ok"},
		{op: "break:0", want: "ok"},
		{op: "write:-", want: "ok"},
		{op: "state", want: "available"},
		{op: "release:A", want: "LeaseIdMismatchWithLeaseOperation"},
	}},
	{name: "create-if-absent", noBlob: true, steps: []step{
		{op: "createIfAbsent", want: "ok"},
		{op: "createIfAbsent", want: "BlobAlreadyExists"},
		{op: "acquire:A:15", want: "ok"},
		{op: "createIfAbsent", want: "LeaseIdMissing", azurite: "BlobAlreadyExists",
			why: "Azure checks the lease first and answers 412 LeaseIdMissing; Azurite answers 409 BlobAlreadyExists (Azurite#2637)"},
		{op: "release:A", want: "ok"},
	}},
	{name: "metadata-under-lease", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "write:-", want: "LeaseIdMissing"},
		{op: "write:B", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "etag:mark"},
		{op: "write:A", want: "ok"},
		{op: "etag:changed"},
		{op: "write-stale-etag:A", want: "ConditionNotMet"},
		{op: "read:-", want: "ok"},
		{op: "read:A", want: "ok"},
		{op: "read:B", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "release:A", want: "ok"},
		{op: "read:A", want: "LeaseNotPresentWithBlobOperation"},
		{op: "write:A", want: "LeaseNotPresentWithBlobOperation"},
	}},
	{name: "lease-ops-keep-etag", steps: []step{
		{op: "etag:mark"},
		{op: "acquire:A:15", want: "ok"},
		{op: "renew:A", want: "ok"},
		{op: "change:A:B", want: "ok"},
		{op: "release:B", want: "ok"},
		{op: "etag:same"},
	}},
	{name: "stale-holder-write", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "break:0", want: "ok"},
		{op: "acquire:B:15", want: "ok"},
		{op: "write:A", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "delete:A", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "delete:-", want: "LeaseIdMissing"},
		{op: "write:B", want: "ok"},
	}},
	{name: "invalid-durations", steps: []step{
		{op: "acquire:A:14", want: "InvalidHeaderValue"},
		{op: "acquire:A:61", want: "InvalidHeaderValue"},
		{op: "acquire:A:0", want: "InvalidHeaderValue"},
		{op: "acquire:A:-2", want: "InvalidHeaderValue"},
		{op: "acquire:A:60", want: "ok"},
		{op: "break:61", want: "InvalidHeaderValue"},
		{op: "release:A", want: "ok"},
	}},
	{name: "non-guid-lease-id", steps: []step{
		{op: "raw-acquire:not-a-guid:15", want: "InvalidHeaderValue", azurite: "ok",
			why: "Azure requires a GUID proposed lease ID (400); Azurite accepts any string"},
	}},
	{name: "lease-id-case", steps: []step{
		{op: "acquire:a:15", want: "ok"},
		{op: "renew:A", want: "ok", azurite: "LeaseIdMismatchWithLeaseOperation",
			why: "lease IDs are GUIDs, which the emulator compares case-insensitively; Azurite compares lease-operation IDs case-sensitively (azlease always sends lower case)"},
	}},
	{name: "missing-blob-and-container", noBlob: true, steps: []step{
		{op: "acquire:A:15", want: "BlobNotFound"},
		{op: "read:-", want: "BlobNotFound"},
		{op: "break:0", want: "BlobNotFound"},
		{op: "other-container-acquire", want: "ContainerNotFound"},
	}},
	{name: "reads-by-state", steps: []step{
		{op: "acquire:A:60", want: "ok"},
		{op: "break:5", want: "ok"},
		{op: "read:A", want: "ok"},
		{op: "read:B", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "write:B", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "sleep:6s"},
		{op: "read:A", want: "LeaseNotPresentWithBlobOperation"},
		{op: "read:-", want: "ok"},
		{op: "release:A", want: "ok"},
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "read:A", want: "LeaseLost", azurite: "LeaseNotPresentWithBlobOperation",
			why: "as for writes: Azure documents LeaseLost for an expired lease ID; Azurite answers LeaseNotPresentWithBlobOperation"},
		{op: "read:B", want: "LeaseNotPresentWithBlobOperation"},
		{op: "state", want: "expired"},
		{op: "renew:A", want: "ok"},
	}},
	{name: "renew-after-other-leased", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "acquire:B:15", want: "ok"},
		{op: "release:B", want: "ok"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "acquire:B:15", want: "ok"},
		{op: "sleep:16s"},
		{op: "renew:A", want: "LeaseIdMismatchWithLeaseOperation", azurite: "ok",
			why: "Azure fails Renew (A) on Expired (B); Azurite's expired state does not check the ID (and revives B's lease)"},
		// Azurite's revived lease would change every later answer: stop here.
		{op: "release:A", want: "LeaseIdMismatchWithLeaseOperation"},
	}},
	{name: "breaking-infinite", steps: []step{
		{op: "acquire:A:-1", want: "ok"},
		{op: "break:60", want: "ok"},
		{op: "state", want: "breaking"},
		{op: "change:B:C", want: "LeaseIdMismatchWithLeaseOperation"}, // wrong ID while breaking
		{op: "change:A:B", want: "LeaseIsBreakingAndCannotBeChanged"}, // right ID while breaking
		{op: "renew:B", want: "LeaseIdMismatchWithLeaseOperation"},
		{op: "release:A", want: "ok"},
		{op: "state", want: "available"},
	}},
	{name: "infinite-lease", steps: []step{
		{op: "acquire:A:-1", want: "ok"},
		{op: "duration", want: "infinite"},
		{op: "sleep:16s"},
		{op: "state", want: "leased"},
		{op: "acquire:A:15", want: "ok"}, // same ID: back to a fixed lease
		{op: "duration", want: "fixed"},
		{op: "acquire:A:-1", want: "ok"},
		{op: "break:nil", want: "ok"}, // an infinite lease breaks at once
		{op: "state", want: "broken"},
	}},
	{name: "list-prefix", noBlob: true, steps: []step{
		{op: "put:slot-1", want: "ok"},
		{op: "put:slot-10", want: "ok"},
		{op: "put:slot-2", want: "ok"},
		{op: "put:slot-1/x", want: "ok"},
		{op: "put:slot", want: "ok"},
		{op: "put:slots/x", want: "ok"},
		{op: "put:Slot-0", want: "ok"},
		{op: "put:slot-é", want: "ok"},
		{op: "put:slot-ｚ", want: "ok"}, // U+FF5A: EF BD 9A in UTF-8, FF5A in UTF-16
		{op: "put:slot-😀", want: "ok"}, // U+1F600: F0 9F 98 80 in UTF-8, D83D DE00 in UTF-16
		{op: "put:other", want: "ok"},
		// A prefix is a plain string prefix: "slot-1" also lists "slot-10"
		// and "slot-1/x"; a caller that wants one blob filters.
		{op: "list:slot-1:", want: "slot-1 slot-1/x slot-10"},
		{op: "list:slot-1/:", want: "slot-1/x"},
		{op: "list:slot-10/:", want: ""},
		{op: "list:slot-:", want: "slot-1 slot-1/x slot-10 slot-2 slot-é slot-ｚ slot-😀",
			azurite: "slot-1 slot-1/x slot-10 slot-2 slot-é slot-😀 slot-ｚ",
			why:     "Azure lists in the byte order of the names' UTF-8; Azurite compares JavaScript strings, UTF-16 code units, so a character beyond U+FFFF sorts before U+E000–U+FFFF"},
		{op: "list:slot:", want: "slot slot-1 slot-1/x slot-10 slot-2 slot-é slot-ｚ slot-😀 slots/x",
			azurite: "slot slot-1 slot-1/x slot-10 slot-2 slot-é slot-😀 slot-ｚ slots/x",
			why:     "as above: UTF-8 byte order on Azure, UTF-16 order on Azurite"},
		{op: "list::", want: "Slot-0 other slot slot-1 slot-1/x slot-10 slot-2 slot-é slot-ｚ slot-😀 slots/x",
			azurite: "Slot-0 other slot slot-1 slot-1/x slot-10 slot-2 slot-é slot-😀 slot-ｚ slots/x",
			why:     "as above: UTF-8 byte order on Azure, UTF-16 order on Azurite"},
		{op: "list:nothing:", want: ""},
		{op: "other-container-list", want: "ContainerNotFound"},
	}},
	{name: "list-paging", noBlob: true, steps: []step{
		{op: "put:b-0", want: "ok"},
		{op: "put:b-1", want: "ok"},
		{op: "put:b-2", want: "ok"},
		{op: "put:b-3", want: "ok"},
		{op: "put:b-4", want: "ok"},
		{op: "list::2", want: "b-0 b-1 | b-2 b-3 | b-4"},
		{op: "list::1", want: "b-0 | b-1 | b-2 | b-3 | b-4"},
		{op: "list::5", want: "b-0 b-1 b-2 b-3 b-4"},
		{op: "list::5000", want: "b-0 b-1 b-2 b-3 b-4"},
		{op: "list::5001", want: "b-0 b-1 b-2 b-3 b-4"}, // above the maximum: the maximum
		{op: "list:b-3:1", want: "b-3"},
		{op: "list::0", want: "OutOfRangeQueryParameterValue", azurite: "400 without a code",
			why: "Azure answers maxresults=0 with 400 OutOfRangeQueryParameterValue; Azurite with a bare 400, no error code and no body"},
	}},
	// Azure bounds a blob's metadata at 8 KiB, names and values together
	// (the x-ms-meta- prefix not counted): shards cut the lease IDs a
	// membership announces to fit.
	{name: "metadata-size", steps: []step{
		{op: "acquire:A:15", want: "ok"},
		{op: "write-size:A:8192", want: "ok"},
		{op: "write-size:A:8193", want: "MetadataTooLarge", azurite: "ok",
			why: "Azure refuses metadata over 8 KiB with 400 MetadataTooLarge; Azurite 3.35.0 does not check the size"},
		{op: "put-size:8192", want: "ok"},
		{op: "put-size:8193", want: "MetadataTooLarge", azurite: "ok",
			why: "Azure refuses metadata over 8 KiB with 400 MetadataTooLarge; Azurite 3.35.0 does not check the size"},
	}},
	{name: "list-metadata", noBlob: true, steps: []step{
		{op: "put:a:Owner=ops,azleaseepoch=7,Note=a&b<c>", want: "ok"},
		{op: "put:b", want: "ok"},
		{op: "list-meta:", want: "a{azleaseepoch=7;note=a&b<c>;owner=ops} b{}"},
		{op: "list-props:a", want: "ok"},
		{op: "use:a"},
		{op: "acquire:A:15", want: "ok"},
		{op: "write:A", want: "ok"}, // replaces the metadata
		{op: "list-meta:", want: "a{step=x} b{}"},
		{op: "list-props:a", want: "ok"},
		{op: "release:A", want: "ok"},
	}},
	{name: "list-lease-states", noBlob: true, steps: []step{
		{op: "use:available"},
		{op: "createIfAbsent", want: "ok"},
		{op: "use:leased"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:60", want: "ok"},
		{op: "use:infinite"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:-1", want: "ok"},
		{op: "use:expires"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:15", want: "ok"},
		{op: "use:breaking"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:60", want: "ok"},
		{op: "break:30", want: "ok"},
		{op: "use:breaks"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:60", want: "ok"},
		{op: "break:5", want: "ok"},
		{op: "use:broken"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:60", want: "ok"},
		{op: "break:0", want: "ok"},
		{op: "use:released"},
		{op: "createIfAbsent", want: "ok"},
		{op: "acquire:A:60", want: "ok"},
		{op: "release:A", want: "ok"},
		{op: "list-states:", want: "available=available,unlocked breaking=breaking,locked breaks=breaking,locked " +
			"broken=broken,unlocked expires=leased,locked,fixed infinite=leased,locked,infinite leased=leased,locked,fixed " +
			"released=available,unlocked"},
		{op: "sleep:16s"},
		// The state in effect when the listing is served: expired, and
		// broken once the break period has passed, with no request to
		// those blobs in between.
		{op: "list-states:", want: "available=available,unlocked breaking=breaking,locked breaks=broken,unlocked " +
			"broken=broken,unlocked expires=expired,unlocked infinite=leased,locked,infinite leased=leased,locked,fixed " +
			"released=available,unlocked"},
		{op: "use:expires"},
		{op: "state", want: "expired"},
		{op: "use:breaks"},
		{op: "state", want: "broken"},
	}},
	// Append blobs: a log that many writers append to without conflicts
	// (storage orders the blocks), with a compare-and-swap on its end and a
	// bound on its size; and ranged reads of its tail.
	{name: "append-blob", noBlob: true, steps: []step{
		{op: "use:log"},
		{op: "create-append", want: "ok"},
		{op: "create-append", want: "BlobAlreadyExists"},
		{op: "etag:mark"},
		{op: "append:hello", want: "ok@0#1"},
		{op: "etag:changed"},
		{op: "append-pos:5:world!", want: "ok@5#2"},
		{op: "append-pos:5:x", want: "AppendPositionConditionNotMet"},
		{op: "append-max:12:xy", want: "MaxBlobSizeConditionNotMet"},
		{op: "append-max:12:x", want: "ok@11#3"},
		{op: "append:", want: "InvalidHeaderValue"},
		{op: "append-props", want: "AppendBlob 12 3"},
		{op: "read-all", want: `"helloworld!x"`},
		{op: "read-range:0:5", want: `"hello" bytes 0-4/12`},
		{op: "read-range:5:0", want: `"world!x" bytes 5-11/12`},
		{op: "read-range:10:100", want: `"!x" bytes 10-11/12`},
		{op: "read-range:11:0", want: `"x" bytes 11-11/12`},
		{op: "read-range:12:0", want: "InvalidRange", azurite: `"" bytes 12-11/12`,
			why: "Azure answers a range that starts at the end of the blob 416 InvalidRange; Azurite 3.35.0 serves it as an empty 206"},
		{op: "read-range:13:1", want: "InvalidRange"},
		{op: "list-props:log", want: "ok"},
		{op: "use:empty"},
		{op: "create-append", want: "ok"},
		{op: "append-props", want: "AppendBlob 0 0"},
		{op: "read-range:0:10", want: "InvalidRange"},
		{op: "use:block"},
		{op: "put:block", want: "ok"},
		{op: "append:x", want: "InvalidBlobType"},
		{op: "use:missing"},
		{op: "append:x", want: "BlobNotFound"},
		{op: "list-types:", want: "block=BlockBlob empty=AppendBlob log=AppendBlob"},
	}},
	{name: "append-lease", noBlob: true, steps: []step{
		{op: "use:log"},
		{op: "create-append", want: "ok"},
		{op: "acquire:A:15", want: "ok"},
		{op: "append:x", want: "LeaseIdMissing"},
		{op: "append-lease:B:x", want: "LeaseIdMismatchWithBlobOperation"},
		{op: "append-lease:A:x", want: "ok@0#1"},
		{op: "release:A", want: "ok"},
		{op: "append:y", want: "ok@1#2"},
	}},
	{name: "append-race", noBlob: true, steps: []step{
		{op: "use:log"},
		{op: "create-append", want: "ok"},
		{op: "append-race:64", want: "ok"},
		{op: "append-props", want: "AppendBlob 512 64"},
	}},
	// An append blob takes 50,000 blocks; a log rotates to a new blob
	// before that.
	{name: "append-limit", noBlob: true, steps: []step{
		{op: "use:full"},
		{op: "create-append", want: "ok"},
		{op: "append-many:50000", want: "ok"},
		{op: "append:x", want: "BlockCountExceedsLimit"},
		{op: "append-props", want: "AppendBlob 50000 50000"},
	}},
}

// backend runs one case's operations.
type backend struct {
	cc        *container.Client
	missing   *container.Client
	blobName  string
	base      string // the case's prefix for List Blobs steps, "case-NAME/"
	etag      *azcore.ETag
	staleETag *azcore.ETag
}

func raw(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

// sizedMetadata is metadata of n bytes as Azure counts them (names and
// values): two pairs, so that both count.
func sizedMetadata(n int) map[string]*string {
	return map[string]*string{"first": to.Ptr("x"), "second": to.Ptr(strings.Repeat("y", n-len("first")-1-len("second")))}
}

// answer maps an error to the answer a step expects.
func answer(err error) string {
	if err == nil {
		return "ok"
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return re.ErrorCode
		}
		return fmt.Sprintf("%d without a code", re.StatusCode)
	}
	return "error: " + err.Error()
}

func (b *backend) leaseClient(who string) *lease.BlobClient {
	lc, err := lease.NewBlobClient(b.cc.NewBlobClient(b.blobName), &lease.BlobClientOptions{LeaseID: to.Ptr(ids[who])})
	if err != nil {
		panic(err)
	}
	return lc
}

func (b *backend) leaseAccess(who string) *blob.AccessConditions {
	if who == "-" {
		return nil
	}
	return &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(ids[who])}}
}

func (b *backend) run(t *testing.T, st step) string {
	ctx := raw(context.Background())
	f := strings.Split(st.op, ":")
	bc := b.cc.NewBlobClient(b.blobName)
	switch f[0] {
	case "acquire":
		secs, _ := strconv.Atoi(f[2])
		_, err := b.leaseClient(f[1]).AcquireLease(ctx, int32(secs), nil)
		return answer(err)
	case "raw-acquire":
		secs, _ := strconv.Atoi(f[2])
		lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: to.Ptr(f[1])})
		require.NoError(t, err)
		_, err = lc.AcquireLease(ctx, int32(secs), nil)
		return answer(err)
	case "renew":
		_, err := b.leaseClient(f[1]).RenewLease(ctx, nil)
		return answer(err)
	case "release":
		_, err := b.leaseClient(f[1]).ReleaseLease(ctx, nil)
		return answer(err)
	case "change":
		_, err := b.leaseClient(f[1]).ChangeLease(ctx, ids[f[2]], nil)
		return answer(err)
	case "break":
		opts := &lease.BlobBreakOptions{}
		if f[1] != "nil" {
			p, _ := strconv.Atoi(f[1])
			opts.BreakPeriod = to.Ptr(int32(p))
		}
		_, err := b.leaseClient("A").BreakLease(ctx, opts)
		return answer(err)
	case "write", "write-stale-etag":
		opts := &blob.SetMetadataOptions{AccessConditions: b.leaseAccess(f[1])}
		if f[0] == "write-stale-etag" {
			if opts.AccessConditions == nil {
				opts.AccessConditions = &blob.AccessConditions{}
			}
			opts.AccessConditions.ModifiedAccessConditions = &blob.ModifiedAccessConditions{IfMatch: b.staleETag}
		}
		_, err := bc.SetMetadata(ctx, map[string]*string{"step": to.Ptr("x")}, opts)
		return answer(err)
	case "write-size":
		n, _ := strconv.Atoi(f[2])
		_, err := bc.SetMetadata(ctx, sizedMetadata(n), &blob.SetMetadataOptions{AccessConditions: b.leaseAccess(f[1])})
		return answer(err)
	case "put-size":
		n, _ := strconv.Atoi(f[1])
		_, err := b.cc.NewBlockBlobClient(b.blobName+"-put").Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)),
			&blockblob.UploadOptions{Metadata: sizedMetadata(n)})
		return answer(err)
	case "delete":
		_, err := bc.Delete(ctx, &blob.DeleteOptions{AccessConditions: b.leaseAccess(f[1])})
		return answer(err)
	case "read":
		_, err := bc.GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: b.leaseAccess(f[1])})
		return answer(err)
	case "createIfAbsent":
		_, err := b.cc.NewBlockBlobClient(b.blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)),
			&blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}})
		return answer(err)
	case "other-container-acquire":
		lc, err := lease.NewBlobClient(b.missing.NewBlobClient(b.blobName), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
		require.NoError(t, err)
		_, err = lc.AcquireLease(ctx, 15, nil)
		return answer(err)
	case "state":
		p, err := bc.GetProperties(ctx, nil)
		if err != nil {
			return answer(err)
		}
		return string(*p.LeaseState)
	case "duration":
		p, err := bc.GetProperties(ctx, nil)
		if err != nil {
			return answer(err)
		}
		if p.LeaseDuration == nil {
			return "none"
		}
		return string(*p.LeaseDuration)
	case "use":
		b.blobName = b.base + f[1]
		return ""
	case "put":
		md := map[string]*string{}
		if len(f) > 2 {
			for _, kv := range strings.Split(f[2], ",") {
				k, v, _ := strings.Cut(kv, "=")
				md[k] = to.Ptr(v)
			}
		}
		_, err := b.cc.NewBlockBlobClient(b.base+f[1]).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)),
			&blockblob.UploadOptions{Metadata: md})
		return answer(err)
	case "list":
		var max *int32
		if f[2] != "" {
			n, _ := strconv.Atoi(f[2])
			max = to.Ptr(int32(n))
		}
		pages, _, err := b.list(ctx, f[1], max)
		if err != nil {
			return answer(err)
		}
		var out []string
		for _, p := range pages {
			out = append(out, strings.Join(p, " "))
		}
		return strings.Join(out, " | ")
	case "list-states", "list-meta":
		_, items, err := b.list(ctx, f[1], nil)
		if err != nil {
			return answer(err)
		}
		var out []string
		for _, it := range items {
			name := strings.TrimPrefix(*it.Name, b.base)
			if f[0] == "list-meta" {
				var kv []string
				for k, v := range it.Metadata {
					kv = append(kv, k+"="+*v)
				}
				sort.Strings(kv)
				out = append(out, name+"{"+strings.Join(kv, ";")+"}")
				continue
			}
			p := it.Properties
			e := name + "=" + string(*p.LeaseState) + "," + string(*p.LeaseStatus)
			if p.LeaseDuration != nil {
				e += "," + string(*p.LeaseDuration)
			}
			out = append(out, e)
		}
		return strings.Join(out, " ")
	case "list-props":
		_, items, err := b.list(ctx, f[1], nil)
		if err != nil {
			return answer(err)
		}
		props, err := b.cc.NewBlobClient(b.base+f[1]).GetProperties(ctx, nil)
		if err != nil {
			return answer(err)
		}
		if len(items) == 0 || *items[0].Name != b.base+f[1] {
			return "not listed"
		}
		return sameProperties(items[0].Properties, props)
	case "other-container-list":
		_, err := b.missing.NewListBlobsFlatPager(nil).NextPage(ctx)
		return answer(err)
	case "list-types":
		_, items, err := b.list(ctx, f[1], nil)
		if err != nil {
			return answer(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, strings.TrimPrefix(*it.Name, b.base)+"="+string(*it.Properties.BlobType))
		}
		return strings.Join(out, " ")
	case "create-append", "append", "append-pos", "append-max", "append-lease", "append-many", "append-race", "append-props", "read-all", "read-range":
		return b.runAppend(ctx, t, f)
	case "sleep":
		d, _ := time.ParseDuration(f[1])
		time.Sleep(d)
		return ""
	case "etag":
		p, err := bc.GetProperties(ctx, nil)
		require.NoError(t, err)
		switch f[1] {
		case "mark":
			b.etag = p.ETag
			b.staleETag = p.ETag
		case "same":
			require.Equal(t, *b.etag, *p.ETag, "lease operations must not change the ETag")
		case "changed":
			require.NotEqual(t, *b.etag, *p.ETag, "a write must change the ETag")
		}
		return ""
	}
	t.Fatalf("unknown step %q", st.op)
	return ""
}

// runAppend runs the append blob steps (see step.op).
func (b *backend) runAppend(ctx context.Context, t *testing.T, f []string) string {
	ab := b.cc.NewAppendBlobClient(b.blobName)
	body := func(s string) io.ReadSeekCloser { return streaming.NopCloser(strings.NewReader(s)) }
	appended := func(r appendblob.AppendBlockResponse, err error) string {
		if err != nil {
			return answer(err)
		}
		if r.BlobAppendOffset == nil || r.BlobCommittedBlockCount == nil {
			return "ok without x-ms-blob-append-offset or x-ms-blob-committed-block-count"
		}
		return fmt.Sprintf("ok@%s#%d", *r.BlobAppendOffset, *r.BlobCommittedBlockCount)
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		return n
	}
	switch f[0] {
	case "create-append":
		_, err := ab.Create(ctx, &appendblob.CreateOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}})
		return answer(err)
	case "append":
		return appended(ab.AppendBlock(ctx, body(f[1]), nil))
	case "append-pos":
		return appended(ab.AppendBlock(ctx, body(f[2]), &appendblob.AppendBlockOptions{
			AppendPositionAccessConditions: &appendblob.AppendPositionAccessConditions{AppendPosition: to.Ptr(num(f[1]))}}))
	case "append-max":
		return appended(ab.AppendBlock(ctx, body(f[2]), &appendblob.AppendBlockOptions{
			AppendPositionAccessConditions: &appendblob.AppendPositionAccessConditions{MaxSize: to.Ptr(num(f[1]))}}))
	case "append-lease":
		return appended(ab.AppendBlock(ctx, body(f[2]), &appendblob.AppendBlockOptions{AccessConditions: b.leaseAccess(f[1])}))
	case "append-many":
		n := num(f[1])
		var next atomic.Int64
		errs := make([]error, 32)
		var wg sync.WaitGroup
		for w := range errs {
			wg.Go(func() {
				for next.Add(1) <= n && errs[w] == nil {
					_, errs[w] = ab.AppendBlock(ctx, body("x"), nil)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return answer(err)
			}
		}
		return "ok"
	case "append-race":
		n := int(num(f[1]))
		offsets := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := ab.AppendBlock(ctx, body(fmt.Sprintf("rec%05d", i)), nil)
				errs[i] = err
				if err == nil && r.BlobAppendOffset != nil {
					offsets[i] = *r.BlobAppendOffset
				}
			})
		}
		wg.Wait()
		d, err := ab.DownloadStream(ctx, nil)
		if err != nil {
			return answer(err)
		}
		content, err := io.ReadAll(d.Body)
		_ = d.Body.Close()
		require.NoError(t, err)
		seen := map[string]bool{}
		for i, off := range offsets {
			if errs[i] != nil {
				return answer(errs[i])
			}
			at, err := strconv.Atoi(off)
			if err != nil || seen[off] || at+8 > len(content) || string(content[at:at+8]) != fmt.Sprintf("rec%05d", i) {
				return fmt.Sprintf("append %d answered offset %q, which does not hold its bytes (or another's answer too)", i, off)
			}
			seen[off] = true
		}
		return "ok"
	case "append-props":
		p, err := ab.GetProperties(ctx, nil)
		if err != nil {
			return answer(err)
		}
		count := "none"
		if p.BlobCommittedBlockCount != nil {
			count = strconv.Itoa(int(*p.BlobCommittedBlockCount))
		}
		return fmt.Sprintf("%s %d %s", *p.BlobType, *p.ContentLength, count)
	case "read-all", "read-range":
		var r blob.HTTPRange
		if f[0] == "read-range" {
			r = blob.HTTPRange{Offset: num(f[1]), Count: num(f[2])}
		}
		d, err := ab.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: r})
		if err != nil {
			return answer(err)
		}
		content, err := io.ReadAll(d.Body)
		_ = d.Body.Close()
		require.NoError(t, err)
		out := strconv.Quote(string(content))
		if d.ContentRange != nil {
			out += " " + *d.ContentRange
		}
		return out
	}
	t.Fatalf("unknown append step %q", f[0])
	return ""
}

// list lists the blobs under the case's prefix plus prefix, page by page,
// with their metadata, names as listed.
func (b *backend) list(ctx context.Context, prefix string, max *int32) ([][]string, []*container.BlobItem, error) {
	pager := b.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix: to.Ptr(b.base + prefix), MaxResults: max, Include: container.ListBlobsInclude{Metadata: true},
	})
	var pages [][]string
	var items []*container.BlobItem
	for n := 0; pager.More() && n < 100; n++ {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, nil, err
		}
		var names []string
		for _, it := range page.Segment.BlobItems {
			names = append(names, strings.TrimPrefix(*it.Name, b.base))
			items = append(items, it)
		}
		pages = append(pages, names)
	}
	return pages, items, nil
}

// sameProperties compares a listed blob's properties with Get Blob
// Properties': "ok", or what differs. Listings carry the ETag without the
// quotes of the ETag header.
func sameProperties(l *container.BlobProperties, p blob.GetPropertiesResponse) string {
	var diffs []string
	check := func(what string, listed, read any) {
		if fmt.Sprint(listed) != fmt.Sprint(read) {
			diffs = append(diffs, fmt.Sprintf("%s: listed %v, read %v", what, listed, read))
		}
	}
	deref := func(v any) any {
		switch p := v.(type) {
		case *azcore.ETag:
			if p != nil {
				return string(*p)
			}
		case *time.Time:
			if p != nil {
				return p.UTC()
			}
		case *int64:
			if p != nil {
				return *p
			}
		case *string:
			if p != nil {
				return *p
			}
		}
		return nil
	}
	check("Etag", deref(l.ETag), strings.Trim(fmt.Sprint(deref(p.ETag)), `"`))
	check("Last-Modified", deref(l.LastModified), deref(p.LastModified))
	check("Creation-Time", deref(l.CreationTime), deref(p.CreationTime))
	check("Content-Length", deref(l.ContentLength), deref(p.ContentLength))
	check("Content-Type", deref(l.ContentType), deref(p.ContentType))
	if l.BlobType == nil || p.BlobType == nil {
		diffs = append(diffs, "BlobType missing")
	} else {
		check("BlobType", string(*l.BlobType), string(*p.BlobType))
	}
	if len(diffs) == 0 {
		return "ok"
	}
	return strings.Join(diffs, "; ")
}

// runCase runs c on the container cc; missing is a client for a container
// that does not exist on the same service. With rec (the live run), a step
// where Azurite differs is recorded instead of asserted: what Azure answers
// there is what the live run finds out.
func runCase(t *testing.T, cc, missing *container.Client, c conformanceCase, isAzurite bool, rec *liveRecord) {
	ctx := raw(context.Background())
	b := &backend{cc: cc, missing: missing, blobName: "case-" + c.name, base: "case-" + c.name + "/"}
	if !c.noBlob {
		_, err := cc.NewBlockBlobClient(b.blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), nil)
		require.NoError(t, err)
	}
	for i, st := range c.steps {
		got := b.run(t, st)
		if st.want == "" {
			continue
		}
		if rec != nil && st.azurite != "" {
			rec.answer(c.name, i, st, got)
			if got != st.want {
				t.Logf("step %d %q: answered %s, documented %s (recorded, not failed)", i, st.op, got, st.want)
			}
			continue
		}
		want := st.want
		if isAzurite && st.azurite != "" {
			want = st.azurite
		}
		require.Equal(t, want, got, "step %d %q (%s)", i, st.op, st.why)
	}
}

// TestConformanceEmulator runs every case on the emulator inside a synctest
// bubble: the expiry cases take no real time.
func TestConformanceEmulator(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := azleasetest.New(nil)
				cc, err := s.ContainerClient("conformance", "")
				require.NoError(t, err)
				missing, err := s.ContainerClient("missing-container", "")
				require.NoError(t, err)
				_, err = cc.Create(raw(context.Background()), nil)
				require.NoError(t, err)
				runCase(t, cc, missing, c, false, nil)
			})
		})
	}
}

// TestConformanceAzurite runs the same cases on the pinned Azurite, in
// parallel because the expiry cases wait in real time. Where Azurite differs
// from Azure's documentation the step says so and expects Azurite's answer.
func TestConformanceAzurite(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the Azurite conformance run waits for real lease expiries")
	}
	az := azurite.Require(t)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	// A fresh container per run: the shared Azurite keeps state across -count.
	cc, err := az.ContainerClient(fmt.Sprintf("conformance-%08x", rand.Uint32()), hc)
	require.NoError(t, err)
	_, err = cc.Create(raw(context.Background()), nil)
	require.NoError(t, err)
	missing, err := az.ContainerClient("missing-container", hc)
	require.NoError(t, err)
	t.Run("cases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				runCase(t, cc, missing, c, true, nil)
			})
		}
	})
}

// TestConformanceDifferences lists the documented Azurite differences, so the
// list in the notes is generated from the suite rather than kept by hand.
func TestConformanceDifferences(t *testing.T) {
	n := 0
	for _, c := range cases {
		for _, st := range c.steps {
			if st.azurite != "" {
				n++
				require.NotEmpty(t, st.why, "a difference must say why")
				t.Logf("%s / %s: Azure %s, Azurite %s — %s", c.name, st.op, st.want, st.azurite, st.why)
			}
		}
	}
	require.Equal(t, 14, n)
}
