package ehbalance

// The ownership records on Blob Storage: listing them, and writing one
// conditionally (claim, renewal, relinquishment).

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// metaOwner is the metadata that names a record's owner, as the SDK's
// blob store writes it.
const metaOwner = "ownerid"

// store reads and writes the ownership records under a prefix.
type store struct {
	cc     *container.Client
	prefix string
}

// list returns the records under the prefix, in name order. A blob
// without an owner counts as relinquished.
func (s store) list(ctx context.Context, known map[string]bool) ([]record, error) {
	pager := s.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  to.Ptr(s.prefix),
		Include: container.ListBlobsInclude{Metadata: true},
	})
	var out []record
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range page.Segment.BlobItems {
			if b == nil || b.Name == nil || b.Properties == nil {
				continue
			}
			p := strings.TrimPrefix(*b.Name, s.prefix)
			if !known[p] {
				continue // not one of this group's partitions
			}
			r := record{partition: p}
			if v := lookup(b.Metadata, metaOwner); v != nil {
				r.owner = *v
			}
			if b.Properties.ETag != nil {
				r.etag = string(*b.Properties.ETag)
			}
			if b.Properties.LastModified != nil {
				r.lastModified = *b.Properties.LastModified
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// lookup finds a metadata value whatever the case of its name.
func lookup(md map[string]*string, name string) *string {
	for k, v := range md {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// errTaken is a write refused for its condition: another processor wrote
// the record first.
var errTaken = errors.New("ehbalance: the ownership record changed since it was listed")

// write sets the owner of r's partition to owner: under If-Match with r's
// ETag, or, for a partition that never had a blob, by creating it with
// If-None-Match: *. It returns the new ETag, or errTaken when the
// condition failed.
func (s store) write(ctx context.Context, r record, owner string) (string, time.Time, error) {
	bc := s.cc.NewBlockBlobClient(s.prefix + r.partition)
	md := map[string]*string{metaOwner: to.Ptr(owner)}
	var etag *azcore.ETag
	var lm *time.Time
	var err error
	if r.etag != "" {
		var resp blob.SetMetadataResponse
		resp, err = bc.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(quoted(r.etag))},
		}})
		etag, lm = resp.ETag, resp.LastModified
	} else {
		var resp blockblob.UploadResponse
		resp, err = bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			Metadata: md,
			AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)},
			},
		})
		etag, lm = resp.ETag, resp.LastModified
	}
	switch {
	case bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobAlreadyExists):
		return "", time.Time{}, errTaken
	case err != nil:
		return "", time.Time{}, err
	}
	var out string
	if etag != nil {
		out = string(*etag)
	}
	var at time.Time
	if lm != nil {
		at = *lm
	}
	return out, at, nil
}

// quoted returns an ETag in the quotes response headers carry: listings
// give it without them (see the package documentation).
func quoted(etag string) azcore.ETag {
	if strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, `W/"`) {
		return azcore.ETag(etag)
	}
	return azcore.ETag(`"` + etag + `"`)
}
