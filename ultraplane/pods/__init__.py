"""Pods and Nodes: how an admitted job runs on its servers.

Which Kubernetes Node is which server of which UltraServer (`nodelabels`), what a server's Neuron
device plugin advertises (`neurondevices`), the pods of an admitted job (`launches`) and what
those pods say about it (`outcomes`). Data in, data out: the adapters do the I/O.
"""
