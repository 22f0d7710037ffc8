// Package buildinfo derives kvindex's version from the build: the version set at link time when
// there is one, else the main module's version and VCS revision from the build info.
package buildinfo

import "runtime/debug"

// Version is set when not empty, else the main module's version and VCS revision from the build
// info (e.g. "devel-8495b73a1c2e-dirty"), else "devel".
func Version(set string) string {
	if set != "" {
		return set
	}
	v := "devel"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		v = mv
	}
	var rev, dirty string
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value[:min(12, len(st.Value))]
		case "vcs.modified":
			if st.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" && v == "devel" {
		v += "-" + rev + dirty
	}
	return v
}
