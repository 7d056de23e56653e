// Package uitest drives 'azlease ui' in a real browser: headless Chromium,
// through the DevTools protocol (github.com/chromedp/chromedp), against
// 'azlease emulator' with real 'azlease lead' and 'azlease shards'
// processes. It is a module of its own so that chromedp stays out of
// azlease's go.mod; 'make test' and 'make lint' enter it, and 'make test'
// installs Chromium first when it is root on Debian
// (scripts/install-browser.sh). It has no non-test code.
package uitest
