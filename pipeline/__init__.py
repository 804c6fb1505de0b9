"""The Spark Structured Streaming job: queue source, loader (read, transform, blobs) and registrar."""
