"""The names of the page's fragments (the parts a control change reruns alone), in one place:
the widgets that rerun them and the functions that draw them use these."""

WHOLE_PAGE = "app"  # not a fragment: a rerun scope meaning the whole page

# Explore's results: what a class or a display option changes
OVERLAY = "overlay"  # the CAM over the image
HEATMAP = "heatmap"  # the raw heatmap
GRID = "grid"  # the feature-map grid
WEIGHTS = "weights"  # the channel weights, under "Channels behind the heatmap"
CHANNEL = "channel"  # one channel's map over the image, in the same panel
SNIPPET = "snippet"  # "Reproduce in Python"
ADDRESS = "address"  # draws nothing: records the display options shown, keeps the URL
DISPLAY = "display"  # the display widgets in the sidebar

# The sidebar's two class widgets: a change in one redraws the other with the pictures
CLASS_BOX = "class_box"
CLASS_TOP5 = "class_top5"
