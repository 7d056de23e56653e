// Package azname holds Azure Blob Storage's naming rules, shared by azlease
// (which refuses a bad name before sending anything) and its emulator (which
// answers a bad name as Azure does), so that the two never drift apart.
package azname

import (
	"fmt"
	"strings"
)

// ContainerProblem returns what is wrong with a container name, or "" when
// Azure accepts it: 3 to 63 characters, lower-case letters, digits and single
// hyphens, starting and ending with a letter or digit; or "$root".
func ContainerProblem(n string) string {
	if n == "$root" {
		return ""
	}
	switch {
	case n == "":
		return "empty"
	case len(n) < 3 || len(n) > 63:
		return "must be 3 to 63 characters long"
	case n[0] == '-' || n[len(n)-1] == '-':
		return "must start and end with a letter or digit"
	case strings.Contains(n, "--"):
		return "must not contain consecutive hyphens"
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return "may contain only lower-case letters, digits and hyphens"
		}
	}
	return ""
}

// BlobProblem returns what is wrong with a blob name by Azure's own rules,
// or "": 1 to 1024 characters, at most 254 path segments, and no path
// segment ending with a dot ("a./b", "a/./b" and "a." are refused: URL
// handling may drop such dots or resolve "." and ".." segments, so the name
// would not be the blob it says).
func BlobProblem(n string) string {
	switch {
	case n == "":
		return "empty"
	case len(n) > 1024:
		return "longer than 1024 characters"
	case strings.Count(n, "/") >= 254:
		return "more than 254 path segments"
	}
	for i, seg := range strings.Split(n, "/") {
		if strings.HasSuffix(seg, ".") {
			return fmt.Sprintf("path segment %d ends with a dot (no path segment may)", i+1)
		}
	}
	return ""
}

// MetadataName reports whether n is a valid metadata name: a C# identifier.
func MetadataName(n string) bool {
	for i, c := range n {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return n != ""
}

// GUID accepts a GUID in the formats Azure does (with or without hyphens,
// braces or parentheses) and returns it in lower-case hyphenated form.
func GUID(v string) (string, bool) {
	if len(v) >= 2 && (v[0] == '{' && v[len(v)-1] == '}' || v[0] == '(' && v[len(v)-1] == ')') {
		v = v[1 : len(v)-1]
	}
	hex := strings.ReplaceAll(v, "-", "")
	if len(hex) != 32 || (len(v) != 32 && len(v) != 36) {
		return "", false
	}
	if len(v) == 36 && (v[8] != '-' || v[13] != '-' || v[18] != '-' || v[23] != '-') {
		return "", false
	}
	for _, c := range hex {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return "", false
		}
	}
	hex = strings.ToLower(hex)
	return hex[0:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], true
}
