package azlease

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
)

// DevelopmentConnectionString is what "UseDevelopmentStorage=true" stands for:
// Azurite's well-known account on its default local port. For another port,
// add DevelopmentStorageProxyUri ("UseDevelopmentStorage=true;
// DevelopmentStorageProxyUri=http://127.0.0.1:10100"), or write the full
// string with that BlobEndpoint.
const DevelopmentConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
	"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
	"BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"

// ContainerClientFromConnectionString returns a client for the container
// containerName from an Azure Storage connection string, as the Azure portal
// shows it. "UseDevelopmentStorage=true" (which azblob does not parse) means
// [DevelopmentConnectionString]. opts passes through to azblob, including its
// azcore.ClientOptions; nil means azblob's defaults (azlease sets retries per
// call), except that with no Transport the client gets azlease's, which keeps
// enough idle connections for many held leases (docs/design/many-leases.md).
func ContainerClientFromConnectionString(connectionString, containerName string, opts *container.ClientOptions) (*container.Client, error) {
	if r := containerNameProblem(containerName); r != "" {
		return nil, optionErr("containerName", "%q: %s", containerName, r)
	}
	cs := strings.TrimSpace(connectionString)
	if cs == "" {
		return nil, optionErr("connectionString", "empty")
	}
	if err := checkConnectionString(cs); err != nil {
		return nil, err
	}
	if isDevelopmentStorage(cs) {
		var err error
		if cs, err = developmentStorage(cs); err != nil {
			return nil, err
		}
	}
	cc, err := container.NewClientFromConnectionString(cs, containerName, withTransport(opts))
	if err != nil {
		// azblob's parse errors do not quote the string, which holds a key.
		return nil, optionErr("connectionString", "%v", err)
	}
	return cc, nil
}

// connectionStringKeys are the keys of Azure Storage connection strings
// (lower case): what the portal, the Azure CLI and Azurite's documentation
// write. azblob ignores keys it does not know, so a misspelt BlobEndpoint
// would silently send every request to a public host name: azlease refuses
// unknown keys instead.
var connectionStringKeys = map[string]bool{
	"defaultendpointsprotocol": true, "accountname": true, "accountkey": true, "endpointsuffix": true,
	"blobendpoint": true, "queueendpoint": true, "tableendpoint": true, "fileendpoint": true,
	"sharedaccesssignature": true, "usedevelopmentstorage": true, "developmentstorageproxyuri": true,
}

// checkConnectionString refuses unknown keys, parts without "=", and
// endpoints that are not http(s) URLs. Its errors name keys, never values
// (a value may be a key or a SAS).
func checkConnectionString(cs string) error {
	for _, part := range strings.Split(cs, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return optionErr("connectionString", "a part is not key=value")
		}
		lk := strings.ToLower(k)
		if !connectionStringKeys[lk] {
			if len(k) > 40 {
				k = k[:40] + "…"
			}
			return optionErr("connectionString", "unknown key %q (known: DefaultEndpointsProtocol, AccountName, AccountKey, EndpointSuffix, BlobEndpoint, SharedAccessSignature, UseDevelopmentStorage, …)", k)
		}
		v = strings.TrimSpace(v)
		switch {
		case lk == "defaultendpointsprotocol" && !strings.EqualFold(v, "http") && !strings.EqualFold(v, "https"):
			return optionErr("connectionString", "DefaultEndpointsProtocol must be http or https")
		case lk == "blobendpoint":
			u, err := url.Parse(v)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return optionErr("connectionString", "BlobEndpoint must be an absolute http(s) URL")
			}
		}
	}
	return nil
}

// developmentStorage expands "UseDevelopmentStorage=true" into Azurite's
// well-known account. With DevelopmentStorageProxyUri=http://host:port, the
// Blob endpoint is on that host and port (port 10000 when none is given), so
// an emulator on another port needs no full connection string.
func developmentStorage(cs string) (string, error) {
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "DevelopmentStorageProxyUri") {
			continue
		}
		u, err := url.Parse(strings.TrimSpace(v))
		if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return "", optionErr("connectionString", "DevelopmentStorageProxyUri must be an http(s) URL such as http://127.0.0.1:10000")
		}
		port := u.Port()
		if port == "" {
			port = "10000"
		}
		endpoint := u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port) + "/devstoreaccount1"
		return strings.Replace(DevelopmentConnectionString, "http://127.0.0.1:10000/devstoreaccount1", endpoint, 1), nil
	}
	return DevelopmentConnectionString, nil
}

func isDevelopmentStorage(cs string) bool {
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		if strings.EqualFold(strings.TrimSpace(k), "UseDevelopmentStorage") && strings.EqualFold(strings.TrimSpace(v), "true") {
			return true
		}
	}
	return false
}

// ContainerClientWithCredential returns a client for the container
// containerName on the Blob service at serviceURL (such as
// "https://account.blob.core.windows.net/") authenticated with a Microsoft
// Entra ID credential. A nil cred means azidentity's DefaultAzureCredential
// (environment, workload identity, managed identity, Azure CLI, …). The
// identity needs a role that can read and write blobs and their leases, such
// as Storage Blob Data Contributor. opts passes through to azblob as in
// [ContainerClientFromConnectionString].
func ContainerClientWithCredential(serviceURL, containerName string, cred azcore.TokenCredential, opts *container.ClientOptions) (*container.Client, error) {
	if r := containerNameProblem(containerName); r != "" {
		return nil, optionErr("containerName", "%q: %s", containerName, r)
	}
	u, err := url.Parse(serviceURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, optionErr("serviceURL", "%q: must be an absolute http(s) URL", redactURL(serviceURL))
	}
	if u.RawQuery != "" {
		return nil, optionErr("serviceURL", "%q: must not carry a query (use ContainerClientFromSASURL for SAS)", redactURL(serviceURL))
	}
	if cred == nil {
		var copts *azidentity.DefaultAzureCredentialOptions
		if opts != nil {
			copts = &azidentity.DefaultAzureCredentialOptions{ClientOptions: opts.ClientOptions}
		}
		cred, err = azidentity.NewDefaultAzureCredential(copts)
		if err != nil {
			return nil, err
		}
	}
	sopts := service.ClientOptions(*withTransport(opts))
	sc, err := service.NewClient(serviceURL, cred, &sopts)
	if err != nil {
		return nil, err
	}
	return sc.NewContainerClient(containerName), nil
}

// ContainerClientFromSASURL returns a client for the container a container
// SAS URL points at ("https://account.blob.core.windows.net/name?sv=…&sig=…").
// The SAS needs read, write and create permissions on blobs (r, w, c), and
// create on the container only if it may be missing. The token never appears
// in azlease's errors or logs. opts passes through to azblob as in
// [ContainerClientFromConnectionString].
func ContainerClientFromSASURL(sasURL string, opts *container.ClientOptions) (*container.Client, error) {
	u, err := url.Parse(sasURL)
	if err != nil || u.Host == "" {
		return nil, optionErr("sasURL", "%q: not an absolute URL", redactURL(sasURL))
	}
	if u.Query().Get("sig") == "" {
		return nil, optionErr("sasURL", "%q: has no SAS token (sig parameter)", redactURL(sasURL))
	}
	cc, err := container.NewClientWithNoCredential(sasURL, withTransport(opts))
	if err != nil {
		return nil, optionErr("sasURL", "%q: %v", redactURL(sasURL), err)
	}
	if _, err := newTarget(cc, "x", "sasURL"); err != nil {
		return nil, err
	}
	return cc, nil
}

// maxIdleConnsPerHost is how many idle connections to the storage account
// the transport azlease installs keeps open for reuse: more than the
// renewals of one container client that run at once (renewConcurrency), so
// that the renewals of many held leases reuse connections instead of opening
// (and, over TLS, negotiating) one per burst. azcore's default transport
// keeps 10. docs/design/many-leases.md tells users with a transport of
// their own to set at least this.
const maxIdleConnsPerHost = 64

// defaultHTTPClient is the transport the constructors install when the
// caller gives none: a clone of http.DefaultTransport (proxy from the
// environment, dial and TLS handshake timeouts, HTTP/2 when offered) that
// keeps maxIdleConnsPerHost idle connections per host, shared by every
// client made without a transport, as azcore shares its own.
var defaultHTTPClient = sync.OnceValue(func() *http.Client {
	tr, ok := http.DefaultTransport.(*http.Transport)
	if !ok { // replaced by the program: leave azcore's default alone
		return nil
	}
	tr = tr.Clone()
	tr.MaxIdleConnsPerHost = maxIdleConnsPerHost
	tr.MaxIdleConns = max(tr.MaxIdleConns, 2*maxIdleConnsPerHost)
	return &http.Client{Transport: tr}
})

// withTransport returns opts, or a copy of it with defaultHTTPClient as the
// transport when opts sets none. It never changes the caller's options.
func withTransport(opts *container.ClientOptions) *container.ClientOptions {
	var o container.ClientOptions
	if opts != nil {
		if opts.Transport != nil {
			return opts
		}
		o = *opts
	}
	if hc := defaultHTTPClient(); hc != nil {
		o.Transport = hc
	}
	return &o
}
