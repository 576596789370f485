// Package dashboard is the admin listener's browser dashboard: one page,
// its script and its style sheet, embedded in the binary so a broker
// serves them with nothing else installed (docs/admin.md#dashboard). The
// script reads the admin API the way any client does; core/admin serves
// these files under /dashboard/ behind the admin login.
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed index.html app.js style.css
var files embed.FS

// Files returns the dashboard's files: index.html, app.js, style.css.
func Files() fs.FS { return files }
