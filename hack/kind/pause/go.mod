module ultraplane.dev/kind/pause

go 1.22
