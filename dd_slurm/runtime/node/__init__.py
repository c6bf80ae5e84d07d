"""What runs on compute nodes from the bundle, standard library only: the on-node command
dispatcher (stepexec), procfs, the leftover scan, the listener check. Each module is listed in
bundle/entry.NODE_MODULES (a test holds the list to this folder)."""
