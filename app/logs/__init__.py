"""Raw logs (content-addressed blobs on disk), uploads, chunked appends and compressed logs."""
