"""Packaging: the PyInstaller spec, its bundle lists, the frozen entry point and the build script."""
