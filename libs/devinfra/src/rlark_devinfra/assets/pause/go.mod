module rlark.local/pause

go 1.22
