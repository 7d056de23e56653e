package azlease_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func TestContainerClientFromConnectionString(t *testing.T) {
	cc, err := azlease.ContainerClientFromConnectionString("UseDevelopmentStorage=true", "locks", nil)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:10000/devstoreaccount1/locks", cc.URL())

	cc, err = azlease.ContainerClientFromConnectionString(" usedevelopmentstorage = TRUE ;", "locks", nil)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:10000/devstoreaccount1/locks", cc.URL())

	cc, err = azlease.ContainerClientFromConnectionString(
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net", "locks", nil)
	require.NoError(t, err)
	assert.Equal(t, "https://acct.blob.core.windows.net/locks", cc.URL())

	_, err = azlease.ContainerClientFromConnectionString("", "locks", nil)
	requireOptionError(t, err, "connectionString")
	_, err = azlease.ContainerClientFromConnectionString("AccountKey=c2VjcmV0LWtleQ==", "locks", nil)
	requireOptionError(t, err, "connectionString")
	assert.NotContains(t, err.Error(), "c2VjcmV0LWtleQ==", "the key never appears in errors")
	_, err = azlease.ContainerClientFromConnectionString("UseDevelopmentStorage=true", "Not_Valid", nil)
	requireOptionError(t, err, "containerName")
}

type fakeCredential struct{}

func (fakeCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "t", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

func TestContainerClientWithCredential(t *testing.T) {
	cc, err := azlease.ContainerClientWithCredential("https://acct.blob.core.windows.net/", "locks", fakeCredential{}, nil)
	require.NoError(t, err)
	assert.Equal(t, "https://acct.blob.core.windows.net/locks", cc.URL())

	for _, u := range []string{"", "acct.blob.core.windows.net", "ftp://x/", "https://acct.blob.core.windows.net/?sig=abc"} {
		_, err := azlease.ContainerClientWithCredential(u, "locks", fakeCredential{}, nil)
		requireOptionError(t, err, "serviceURL")
		assert.NotContains(t, err.Error(), "sig=abc")
	}
	_, err = azlease.ContainerClientWithCredential("https://acct.blob.core.windows.net/", "", fakeCredential{}, nil)
	requireOptionError(t, err, "containerName")
}

// TestContainerClientFromSASURL runs a lease over a SAS client on a real
// loopback socket, and checks the token never leaks into errors.
func TestContainerClientFromSASURL(t *testing.T) {
	srv := azleasetest.New(nil)
	ep, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer ep.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}

	cc, err := azlease.ContainerClientFromSASURL(ep.URL+"/locks?sv=2024-08-04&sp=rwc&sig=c2VjcmV0", opts)
	require.NoError(t, err)
	l, err := azlease.NewLease(cc, "leader", nil)
	require.NoError(t, err)
	tok, err := l.Acquire(context.Background())
	require.NoError(t, err)
	assert.NotZero(t, tok.Epoch)
	require.NoError(t, l.Release(context.Background()))

	_, err = azlease.ContainerClientFromSASURL(ep.URL+"/locks?sv=2024-08-04", opts)
	requireOptionError(t, err, "sasURL")
	_, err = azlease.ContainerClientFromSASURL("not a url", opts)
	requireOptionError(t, err, "sasURL")
	_, err = azlease.ContainerClientFromSASURL(ep.URL+"/Bad_Name?sig=c2VjcmV0", opts)
	requireOptionError(t, err, "container")
	assert.NotContains(t, err.Error(), "c2VjcmV0")

	// A transport error quotes the URL; the signature is redacted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String() + "/devstoreaccount1/locks?sv=1&sig=c2VjcmV0"
	require.NoError(t, ln.Close())
	cc, err = azlease.ContainerClientFromSASURL(dead, opts)
	require.NoError(t, err)
	l, err = azlease.NewLease(cc, "leader", &azlease.LeaseOptions{AttemptTimeout: time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = l.Acquire(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, azlease.ErrTransient, "the last attempt's failure is kept")
	assert.Contains(t, err.Error(), "sig=REDACTED")
	assert.NotContains(t, err.Error(), "c2VjcmV0")
}

// TestConnectionStringMistakesAreRefused: azblob ignores keys it does not
// know, so a misspelt BlobEndpoint silently pointed every request at a public
// host and retried forever. azlease refuses it when the client is built,
// naming the key and never echoing a value.
func TestConnectionStringMistakesAreRefused(t *testing.T) {
	for _, cs := range []string{
		"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=c2VjcmV0LWtleQ==;BlobEndpont=http://127.0.0.1:10000/devstoreaccount1;",
		"DefaultEndpointsProtocol=htp;AccountName=acct;AccountKey=c2VjcmV0LWtleQ==",
		"AccountName=acct;AccountKey=c2VjcmV0LWtleQ==;BlobEndpoint=htp://127.0.0.1:10000/acct",
		"AccountName=acct;c2VjcmV0LWtleQ==",
	} {
		_, err := azlease.ContainerClientFromConnectionString(cs, "locks", nil)
		requireOptionError(t, err, "connectionString")
		assert.NotContains(t, err.Error(), "c2VjcmV0LWtleQ==")
	}
	_, err := azlease.ContainerClientFromConnectionString("AccountName=a;AccountKey=c2VjcmV0LWtleQ==;BlobEndpont=http://x/a", "locks", nil)
	assert.ErrorContains(t, err, `"BlobEndpont"`)

	// A client built by hand with a bad scheme is refused by the constructors.
	cc, err := container.NewClientWithNoCredential("htp://127.0.0.1:10000/devstoreaccount1/locks", nil)
	require.NoError(t, err)
	_, err = azlease.NewMutex(cc, "m", nil)
	requireOptionError(t, err, "container")
}

// TestDevelopmentStorageOnAnotherPort: UseDevelopmentStorage=true means port
// 10000 unless DevelopmentStorageProxyUri says otherwise.
func TestDevelopmentStorageOnAnotherPort(t *testing.T) {
	cc, err := azlease.ContainerClientFromConnectionString("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://127.0.0.1:10100", "locks", nil)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:10100/devstoreaccount1/locks", cc.URL())
	cc, err = azlease.ContainerClientFromConnectionString("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite", "locks", nil)
	require.NoError(t, err)
	assert.Equal(t, "http://azurite:10000/devstoreaccount1/locks", cc.URL())
	_, err = azlease.ContainerClientFromConnectionString("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=ftp://x", "locks", nil)
	requireOptionError(t, err, "connectionString")
}
