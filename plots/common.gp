# Shared by every memopt figure: terminals and style. The caller (memopt plot, memopt claims)
# defines outdir (data files in, figures out) and scriptdir; each figure script loops over
#   do for [fmt in "png svg"] { @settitle; eval(term(fmt)); set output outfile(name, fmt); ... }
# PNG goes through cairo when this gnuplot has it (smooth text), else through libgd.
if (!exists("outdir")) outdir = "."
if (!exists("width")) width = 1280
if (!exists("height")) height = 760
havecairo = strstrt(GPVAL_TERMINALS, " pngcairo ") > 0
term(fmt) = fmt eq "png" ? \
    (havecairo ? sprintf("set terminal pngcairo noenhanced size %d,%d font 'DejaVu Sans,11'", width, height) \
               : sprintf("set terminal png noenhanced size %d,%d font 'DejaVuSans,10'", width, height)) : \
    sprintf("set terminal svg noenhanced size %d,%d font 'DejaVu Sans,11' background rgb 'white'", width, height)
outfile(name, fmt) = outdir."/".name.".".fmt
data(name) = outdir."/".name
# The style, as a macro so a multiplot panel can re-apply it after reset.
style = "set datafile missing 'NaN'; set style fill solid 0.85 border rgb '#404040'; set grid ytics lc rgb '#d8d8d8'; set border 3; set tics nomirror; set key noenhanced"
@style
# A panel with no data: a centred sentence instead of axes ("\n" in msg breaks the line).
empty_panel(msg) = sprintf('unset border; unset tics; unset grid; unset key; set xrange [0:1]; set yrange [0:1]; set label 99 "%s" at graph 0.5,0.5 center font ",12"; plot 2 notitle; unset label 99; @style', msg)
# Colours of the memory categories, shared by the figures that split memory.
c_param = "#4e79a7"; c_grad = "#f28e2b"; c_optim = "#e15759"; c_master = "#76b7b2"; c_act = "#59a14f"; c_ws = "#b07aa1"
