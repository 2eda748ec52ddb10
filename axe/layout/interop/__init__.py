"""Interop between Axe layouts and other systems' layout vocabularies.

Each module imports its foreign library (torch, TVM, ...) lazily, inside the functions that
need it, so that ``axe.layout`` stays importable without them.
"""
