package azlease

// SetBeforeRenew installs a hook that runs before each renewal of e's
// leases, so tests can make the renewer oversleep as if its process had been
// paused. Test-only: this file is compiled only into the package's tests.
func SetBeforeRenew(e *Elector, f func()) { e.beforeRenew = f }
