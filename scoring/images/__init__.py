"""Images: which platform a host and an image are (``platforms``), and submission
images through a container registry by digest (``registry``). Above the engine only."""
