package azlease

// SetOnceBeforeAcquire installs f to run before each DoOnce call tries to
// take its key's lease (a test pauses a caller there) and returns a function
// that restores the previous hook. Set it before the callers start and
// restore it after they have returned: the hook is read without a lock.
func SetOnceBeforeAcquire(f func(key string)) (restore func()) {
	prev := onceBeforeAcquire
	onceBeforeAcquire = f
	return func() { onceBeforeAcquire = prev }
}
