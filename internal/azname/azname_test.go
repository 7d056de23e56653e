package azname

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestContainerProblem(t *testing.T) {
	for _, ok := range []string{"$root", "abc", "a-b-c", "0ab", strings.Repeat("a", 63)} {
		assert.Empty(t, ContainerProblem(ok), ok)
	}
	for _, bad := range []string{"", "ab", "Abc", "a_b", "-ab", "ab-", "a--b", strings.Repeat("a", 64), "ab/c"} {
		assert.NotEmpty(t, ContainerProblem(bad), bad)
	}
}

func TestBlobProblem(t *testing.T) {
	assert.Empty(t, BlobProblem("a"))
	assert.Empty(t, BlobProblem(strings.Repeat("a", 1024)))
	assert.Empty(t, BlobProblem(strings.Repeat("a/", 253)+"a"))
	assert.NotEmpty(t, BlobProblem(""))
	assert.NotEmpty(t, BlobProblem(strings.Repeat("a", 1025)))
	assert.NotEmpty(t, BlobProblem(strings.Repeat("a/", 254)+"a"))
}

// TestBlobSegmentsMustNotEndWithADot: Azure's rule applies to every path
// segment, not only to the end of the name.
func TestBlobSegmentsMustNotEndWithADot(t *testing.T) {
	for _, ok := range []string{"a.b", ".a", "a/.b/c", "a/b.c/d.e", "a//b", "v1.2.3/x", "…"} {
		assert.Empty(t, BlobProblem(ok), ok)
	}
	for _, bad := range []string{"a.", "a/b.", "a/./b", "a/../b", "x./y", "./a", "../a", "a/b./c", ".", "..", "a/."} {
		assert.Contains(t, BlobProblem(bad), "ends with a dot", bad)
	}
	assert.Contains(t, BlobProblem("a/./b"), "segment 2")
}

func TestMetadataName(t *testing.T) {
	for _, ok := range []string{"a", "_a", "A1", "azleaseEpoch"} {
		assert.True(t, MetadataName(ok), ok)
	}
	for _, bad := range []string{"", "1a", "a-b", "a b", "é"} {
		assert.False(t, MetadataName(bad), bad)
	}
}

func TestGUID(t *testing.T) {
	want := "0f0e0d0c-0b0a-4908-8706-050403020100"
	for _, in := range []string{want, strings.ToUpper(want), "{" + want + "}", "(" + want + ")", strings.ReplaceAll(want, "-", "")} {
		got, ok := GUID(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "not-a-guid", want[:35], want + "0", "0f0e0d0c-0b0a-4908-8706-05040302010g", "0f0e0d0c0-b0a-4908-8706-050403020100"} {
		_, ok := GUID(bad)
		assert.False(t, ok, bad)
	}
}
