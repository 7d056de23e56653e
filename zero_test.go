package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// Issue 19 item 2: no exported type panics when misused. For every exported
// type of azlease, azleasetest and shards, every method is called on the type's
// zero value (through a pointer to it) and, for methods with a pointer
// receiver, on a nil pointer, with zero arguments (context.Background() for
// a context, a recording testing.TB, an httptest recorder and request). No
// call may panic or hang. For the types that must be made by a constructor
// (Lease, Mutex, Semaphore, Elector), every method that returns an error
// returns ErrNotInitialized, naming the constructor; the others return the
// documented zero result.
//
// The list of types comes from the packages' source (go/doc), so a new
// exported type fails this test until it is added below, and every method
// of a listed type, including one added later, is called through
// reflection. (A method with a value receiver cannot be called through a
// nil pointer without Go's own wrapper panicking, before the method runs:
// those are called on the zero value only.)

// zeroTypes lists every exported type of each package, by name.
var zeroTypes = map[string]map[string]reflect.Type{
	".": {
		"AfterTask":       reflect.TypeFor[azlease.AfterTask](),
		"Candidate":       reflect.TypeFor[azlease.Candidate](),
		"YieldOptions":    reflect.TypeFor[azlease.YieldOptions](),
		"YieldRequest":    reflect.TypeFor[azlease.YieldRequest](),
		"DoOnceOptions":   reflect.TypeFor[azlease.DoOnceOptions](),
		"Elector":         reflect.TypeFor[azlease.Elector](),
		"ElectorOptions":  reflect.TypeFor[azlease.ElectorOptions](),
		"Error":           reflect.TypeFor[azlease.Error](),
		"HistoryEntry":    reflect.TypeFor[azlease.HistoryEntry](),
		"LeaderInfo":      reflect.TypeFor[azlease.LeaderInfo](),
		"Lease":           reflect.TypeFor[azlease.Lease](),
		"LeaseOptions":    reflect.TypeFor[azlease.LeaseOptions](),
		"Lock":            reflect.TypeFor[azlease.Lock](),
		"Mutex":           reflect.TypeFor[azlease.Mutex](),
		"MutexOptions":    reflect.TypeFor[azlease.MutexOptions](),
		"OnceFailedError": reflect.TypeFor[azlease.OnceFailedError](),
		"OnceResult":      reflect.TypeFor[azlease.OnceResult](),
		"OnceState":       reflect.TypeFor[azlease.OnceState](),
		"OnceStatus":      reflect.TypeFor[azlease.OnceStatus](),
		"OptionError":     reflect.TypeFor[azlease.OptionError](),
		"PanicError":      reflect.TypeFor[azlease.PanicError](),
		"Semaphore":       reflect.TypeFor[azlease.Semaphore](),
		"Status":          reflect.TypeFor[azlease.Status](),
		"Waiter":          reflect.TypeFor[azlease.Waiter](),
		"Task":            reflect.TypeFor[azlease.Task](),
		"Term":            reflect.TypeFor[azlease.Term](),
		"TermChange":      reflect.TypeFor[azlease.TermChange](),
		"Token":           reflect.TypeFor[azlease.Token](),
	},
	"azleasetest": {
		"Action":         reflect.TypeFor[azleasetest.Action](),
		"Endpoint":       reflect.TypeFor[azleasetest.Endpoint](),
		"ExclusionError": reflect.TypeFor[azleasetest.ExclusionError](),
		"Fault":          reflect.TypeFor[azleasetest.Fault](),
		"FaultFunc":      reflect.TypeFor[azleasetest.FaultFunc](),
		"Grant":          reflect.TypeFor[azleasetest.Grant](),
		"Interval":       reflect.TypeFor[azleasetest.Interval](),
		"Op":             reflect.TypeFor[azleasetest.Op](),
		"Options":        reflect.TypeFor[azleasetest.Options](),
		"PartitionMode":  reflect.TypeFor[azleasetest.PartitionMode](),
		"Recorder":       reflect.TypeFor[azleasetest.Recorder](),
		"Request":        reflect.TypeFor[azleasetest.Request](),
		"Server":         reflect.TypeFor[azleasetest.Server](),
		"Violation":      reflect.TypeFor[azleasetest.Violation](),
		"ViolationKind":  reflect.TypeFor[azleasetest.ViolationKind](),
	},
	"shards": {
		"Assignment":   reflect.TypeFor[shards.Assignment](),
		"Group":        reflect.TypeFor[shards.Group](),
		"MemberStatus": reflect.TypeFor[shards.MemberStatus](),
		"Options":      reflect.TypeFor[shards.Options](),
		"Shard":        reflect.TypeFor[shards.Shard](),
		"ShardStatus":  reflect.TypeFor[shards.ShardStatus](),
		"Work":         reflect.TypeFor[shards.Work](),
	},
}

// constructed are the types whose zero value is unusable: their methods
// that return an error return ErrNotInitialized.
var constructed = []string{"Lease", "Mutex", "Semaphore", "Elector", "Group"}

func TestZeroValuesNeverPanic(t *testing.T) {
	for dir, types := range zeroTypes {
		t.Run(dir, func(t *testing.T) {
			declared := exportedTypes(t, dir)
			for name, methods := range declared {
				typ, ok := types[name]
				if !assertListed(t, ok, dir, name) {
					continue
				}
				for _, m := range methods {
					if _, ok := reflect.PointerTo(typ).MethodByName(m); !ok {
						t.Errorf("%s.%s: go/doc lists it, reflection does not", name, m)
					}
				}
			}
			for name, typ := range types {
				if _, ok := declared[name]; !ok {
					t.Errorf("%s lists %s, which the package does not export: remove it", dir, name)
					continue
				}
				t.Run(name, func(t *testing.T) { callAll(t, typ, slices.Contains(constructed, name) && dir == ".") })
			}
		})
	}
}

func assertListed(t *testing.T, ok bool, dir, name string) bool {
	t.Helper()
	if !ok {
		t.Errorf("%s exports %s, which zeroTypes does not list: add it, so that its zero value and nil pointer are checked", dir, name)
	}
	return ok
}

// exportedTypes returns the exported types declared in the package in dir
// (its non-test files), with the names of their exported methods.
func exportedTypes(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files)
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+dir)
	require.NoError(t, err)
	out := map[string][]string{}
	for _, ty := range pkg.Types {
		var ms []string
		for _, m := range ty.Methods {
			ms = append(ms, m.Name)
		}
		out[ty.Name] = ms
	}
	return out
}

// callAll calls every method of typ on a pointer to its zero value, and
// every pointer-receiver method on a nil pointer.
func callAll(t *testing.T, typ reflect.Type, mustInit bool) {
	pt := reflect.PointerTo(typ)
	for i := range pt.NumMethod() {
		m := pt.Method(i)
		_, valueMethod := typ.MethodByName(m.Name)
		receivers := map[string]reflect.Value{"zero": reflect.New(typ)}
		if !valueMethod {
			receivers["nil"] = reflect.Zero(pt)
		}
		for kind, recv := range receivers {
			what := fmt.Sprintf("%s (*%s).%s", kind, typ.Name(), m.Name)
			out, err := call(recv.MethodByName(m.Name))
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			if mustInit && len(out) > 0 && out[len(out)-1].Type() == reflect.TypeFor[error]() {
				got, _ := out[len(out)-1].Interface().(error)
				if !errors.Is(got, azlease.ErrNotInitialized) || !strings.Contains(got.Error(), "New"+typ.Name()) {
					t.Errorf("%s returned %v, not ErrNotInitialized naming New%s", what, got, typ.Name())
				}
			}
		}
	}
}

// call calls fn with zero arguments, and then what it returned that can be
// called or served, each under recover and a time limit.
func call(fn reflect.Value) ([]reflect.Value, error) {
	var out []reflect.Value
	err := guarded(func() { out = fn.Call(zeroArgs(fn.Type())) })
	if err != nil {
		return nil, err
	}
	for _, v := range out {
		switch r := v.Interface().(type) {
		case func():
			if err := guarded(r); err != nil {
				return nil, fmt.Errorf("the func it returned: %w", err)
			}
		case http.Handler:
			if err := guarded(func() {
				r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
			}); err != nil {
				return nil, fmt.Errorf("the handler it returned: %w", err)
			}
		}
	}
	return out, nil
}

// guarded runs f and reports a panic, or f not returning within 10 s.
func guarded(f func()) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- fmt.Errorf("panicked: %v", v)
			}
		}()
		f()
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("did not return within 10 s")
	}
}

// zeroArgs returns the arguments for a call of a function of type ft: the
// zero value of each, except the ones a caller cannot give as zero.
func zeroArgs(ft reflect.Type) []reflect.Value {
	args := make([]reflect.Value, ft.NumIn())
	for i := range args {
		switch in := ft.In(i); in {
		case reflect.TypeFor[context.Context]():
			args[i] = reflect.ValueOf(context.Background())
		case reflect.TypeFor[testing.TB]():
			args[i] = reflect.ValueOf(testing.TB(&recordingTB{}))
		case reflect.TypeFor[http.ResponseWriter]():
			args[i] = reflect.ValueOf(http.ResponseWriter(httptest.NewRecorder()))
		case reflect.TypeFor[*http.Request]():
			args[i] = reflect.ValueOf(httptest.NewRequest(http.MethodGet, "/", nil))
		default:
			args[i] = reflect.Zero(in)
		}
	}
	return args
}

// recordingTB is a testing.TB that records failures instead of failing.
type recordingTB struct {
	testing.TB
	failed []string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Errorf(f string, a ...any) { r.failed = append(r.failed, fmt.Sprintf(f, a...)) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.Errorf(f, a...) }
func (r *recordingTB) Cleanup(func())            {}

// TestZeroServerFailsTheTest: CheckExclusive on a Server not made by New
// or NewServer fails the test it is given, rather than passing for lack of
// grants.
func TestZeroServerFailsTheTest(t *testing.T) {
	var rec recordingTB
	var s *azleasetest.Server
	s.CheckExclusive(&rec, "x", nil)
	require.Len(t, rec.failed, 1)
	require.Contains(t, rec.failed[0], "not created with New")
	require.Nil(t, s.Client("a"))
	_, err := azlease.NewMutex(s.Client("a"), "m", nil)
	require.ErrorIs(t, err, azlease.ErrInvalidOptions)
}
