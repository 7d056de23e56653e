package azleasetest_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// localServiceURL is where in-process clients send their requests; nothing
// listens there.
const localServiceURL = "http://127.0.0.1:10000/" + azleasetest.Account

// wrongKey is a well-formed key that is not the emulator's.
var wrongKey = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("not the key! ", 5)))

// sharedKeyClient returns a client for container "auth" at serviceURL signed
// with account and key, over the given transport.
func sharedKeyClient(t *testing.T, serviceURL, account, key string, tr policyTransport) *container.Client {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(account, key)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(serviceURL+"/auth", cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}})
	require.NoError(t, err)
	return cc
}

// sharedKeyClientWith is sharedKeyClient with extra headers on every request,
// added before the request is signed.
func sharedKeyClientWith(t *testing.T, serviceURL, key string, tr policyTransport, h addHeaders) *container.Client {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, key)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(serviceURL+"/auth", cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr, PerCallPolicies: []policy.Policy{h}}})
	require.NoError(t, err)
	return cc
}

type addHeaders map[string]string

func (h addHeaders) Do(req *policy.Request) (*http.Response, error) {
	for k, v := range h {
		req.Raw().Header[k] = []string{v}
	}
	return req.Next()
}

type policyTransport interface {
	Do(*http.Request) (*http.Response, error)
}

// exercise runs requests that cover the signed parts azlease uses: a
// container create, a blob upload with metadata and conditions, a lease with
// its x-ms- headers, and a read with a query string.
func exercise(ctx context.Context, cc *container.Client) error {
	if _, err := cc.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return err
	}
	bb := cc.NewBlockBlobClient("dir/lock blob ü")
	md := map[string]*string{"Zeta": ptr("1"), "alpha": ptr("2"), "a_b": ptr("3"), "ab": ptr("4")}
	if _, err := bb.UploadBuffer(ctx, []byte("content"), &blockblob.UploadBufferOptions{Metadata: md}); err != nil {
		return err
	}
	if _, err := bb.GetProperties(ctx, nil); err != nil {
		return err
	}
	if _, err := cc.GetProperties(ctx, nil); err != nil {
		return err
	}
	// A listing, a page per blob: the signature covers comp, include,
	// marker (from the second page), maxresults, prefix and restype.
	if _, err := cc.NewBlockBlobClient("dir/lock blob ü+2").UploadBuffer(ctx, nil, nil); err != nil {
		return err
	}
	pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix: ptr("dir/lock blob ü"), MaxResults: to.Ptr(int32(1)), Include: container.ListBlobsInclude{Metadata: true},
	})
	var names []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, it := range page.Segment.BlobItems {
			names = append(names, *it.Name)
		}
	}
	if want := []string{"dir/lock blob ü", "dir/lock blob ü+2"}; !slices.Equal(names, want) {
		return fmt.Errorf("listed %q, want %q", names, want)
	}
	return nil
}

func TestSharedKeyInProcess(t *testing.T) {
	s := azleasetest.New(nil)
	defer s.Close()
	ctx := raw(context.Background())

	good := sharedKeyClient(t, localServiceURL, azleasetest.Account, azleasetest.AccountKey, s.Transport(""))
	require.NoError(t, exercise(ctx, good), "the right key is accepted")

	bad := sharedKeyClient(t, localServiceURL, azleasetest.Account, wrongKey, s.Transport(""))
	err := exercise(ctx, bad)
	requireAuthFailed(t, err)

	other := sharedKeyClient(t, localServiceURL, "someoneelse", azleasetest.AccountKey, s.Transport(""))
	requireAuthFailed(t, exercise(ctx, other))

	anon, err := container.NewClientWithNoCredential(localServiceURL+"/auth",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: s.Transport("")}})
	require.NoError(t, err)
	_, err = anon.GetProperties(ctx, nil)
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, http.StatusUnauthorized, re.StatusCode)
	assert.Equal(t, "NoAuthenticationInformation", re.ErrorCode)

	// A SAS is accepted without verification.
	sas, err := container.NewClientWithNoCredential(localServiceURL+"/auth?sv=2024-08-04&sp=rwc&sig=c2lnbmF0dXJl",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: s.Transport("")}})
	require.NoError(t, err)
	_, err = sas.GetProperties(ctx, nil)
	require.NoError(t, err)

	// Header names where the service's order is not byte order: the
	// signature covers them in the SDK's order, which the server must share.
	odd := sharedKeyClientWith(t, localServiceURL, azleasetest.AccountKey, s.Transport(""), addHeaders{
		"x-ms-a-b": "1", "x-ms-ab": "2", "x-ms-a_b": "3", "X-Ms-Upper": "4", "x-ms-a'b": "5",
	})
	require.NoError(t, exercise(ctx, odd))

	// AllowAnyKey turns the check off.
	lax := azleasetest.New(&azleasetest.Options{AllowAnyKey: true})
	defer lax.Close()
	require.NoError(t, exercise(ctx, sharedKeyClient(t, localServiceURL, azleasetest.Account, wrongKey, lax.Transport(""))))
}

func TestSharedKeyOverHTTP(t *testing.T) {
	s := azleasetest.New(nil)
	defer s.Close()
	ep, err := s.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer ep.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx := raw(context.Background())
	base := strings.TrimSuffix(ep.URL, "/"+azleasetest.Account)
	base += "/" + azleasetest.Account

	require.NoError(t, exercise(ctx, sharedKeyClient(t, base, azleasetest.Account, azleasetest.AccountKey, hc)), "the right key is accepted")
	err = exercise(ctx, sharedKeyClient(t, base, azleasetest.Account, wrongKey, hc))
	requireAuthFailed(t, err)
	assert.Contains(t, err.Error(), "Server failed to authenticate the request", "Azure's message")

	// Through a connection string, as users configure it.
	cc, err := container.NewClientFromConnectionString(ep.ConnectionString(), "auth",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hc}})
	require.NoError(t, err)
	require.NoError(t, exercise(ctx, cc))
	wrong := strings.Replace(ep.ConnectionString(), azleasetest.AccountKey, wrongKey, 1)
	cc, err = container.NewClientFromConnectionString(wrong, "auth",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hc}})
	require.NoError(t, err)
	requireAuthFailed(t, exercise(ctx, cc))
}

func requireAuthFailed(t *testing.T, err error) {
	t.Helper()
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, http.StatusForbidden, re.StatusCode)
	assert.True(t, bloberror.HasCode(err, bloberror.AuthenticationFailed), "code %s", re.ErrorCode)
	assert.NotEmpty(t, re.RawResponse.Header.Get("x-ms-request-id"))
}

func ptr(s string) *string { return &s }
