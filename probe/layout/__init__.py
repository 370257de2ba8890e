"""The on-disk layout of a workspace: the names of its files, both MANIFESTs, the md rotation
status file, the md pool's names and object content, the atomic replace of a small file, path
safety, the errors that refuse a path and what statvfs's inode counts mean. Imports only
``slowdown.analysis`` below it: every other probe room may read a workspace's layout through
it."""
