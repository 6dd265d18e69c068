"""Thin DVC stage scripts: parse arguments, load params, call the library/flows, write outs."""
