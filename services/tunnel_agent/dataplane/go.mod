module rlark.local/tunneldp

go 1.24.0

require golang.org/x/crypto v0.48.0

require golang.org/x/sys v0.41.0 // indirect
